package pluginmgr_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/internal/testbin"
)

// waitForChild waits until this process has a child (a plugin being
// started) and returns its PID.
func waitForChild(t testing.TB) int {
	t.Helper()
	for {
		if c := children(t); len(c) > 0 {
			return c[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// liveness is how long a test waits for something that should happen at
// once before it reports a hang instead of stalling the run: a bound on
// correctness, not on speed.
const liveness = time.Minute

// Cancelling Launch's context ends a start that would otherwise wait for a
// stuck plugin: the process is killed and reaped and the error says why.
func TestLaunchAbandonedByContext(t *testing.T) {
	tests := []struct {
		name  string
		cfg   func(dir string) pluginmgr.PluginConfig
		stuck func(t *testing.T, dir string) // waits until the plugin is stuck
	}{
		{
			name: "handshake never completes",
			cfg: func(string) pluginmgr.PluginConfig {
				return pluginmgr.PluginConfig{Path: testDriverPath, SHA256: testbin.SHA256(testDriverPath), Args: []string{"-mode=hang"}}
			},
			stuck: func(t *testing.T, _ string) { waitForChild(t) },
		},
		{
			name: "Configure never returns",
			cfg: func(dir string) pluginmgr.PluginConfig {
				return testConfig(t, map[string]any{"hangIn": "Configure", "blockDir": dir})
			},
			stuck: func(t *testing.T, dir string) { waitForFile(t, filepath.Join(dir, "Configure-started")) },
		},
		{
			name: "Info never returns",
			cfg: func(dir string) pluginmgr.PluginConfig {
				return testConfig(t, map[string]any{"hangIn": "Info", "blockDir": dir})
			},
			stuck: func(t *testing.T, dir string) { waitForFile(t, filepath.Join(dir, "Info-started")) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c := children(t); len(c) != 0 {
				t.Fatalf("children before the test: %v", c)
			}
			dir := t.TempDir()
			opts := quietOptions()
			opts.StartTimeout = time.Hour // only the context can end this start
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				p, err := pluginmgr.Launch(ctx, tt.cfg(dir), opts)
				if err == nil {
					p.Close()
				}
				errc <- err
			}()
			tt.stuck(t, dir)
			cancel()
			var err error
			select {
			case err = <-errc:
			case <-time.After(liveness):
				t.Fatalf("Launch still running %s after its context was cancelled", liveness)
			}
			if !errors.Is(err, context.Canceled) || errors.Is(err, pluginmgr.ErrStartTimeout) {
				t.Fatalf("Launch = %v, want an error wrapping context.Canceled", err)
			}
			if c := children(t); len(c) != 0 {
				t.Errorf("children (or zombies) left by the abandoned start: %v", c)
			}
		})
	}
}

// The context bounds the start only: cancelling it later leaves the plugin
// running.
func TestLaunchContextEndsWithTheStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p, err := pluginmgr.Launch(ctx, testConfig(t, nil), quietOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cancel()
	if _, err := p.Prepare(context.Background(), []pluginmgr.Claim{claimFor("a", "dev0")}); err != nil {
		t.Fatalf("Prepare after the launch context ended = %v", err)
	}
	if st := p.Status(); st.State != pluginmgr.StateRunning || st.Restarts != 0 {
		t.Errorf("status after the launch context ended = %+v", st)
	}
}

func TestManagerStartWithEndedContext(t *testing.T) {
	m := pluginmgr.NewManager(quietOptions())
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := m.Start(ctx, twoConfigs(t))
	var se *pluginmgr.StartError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &se) {
		t.Fatalf("Start with a cancelled context = %v, want *StartError wrapping context.Canceled", err)
	}
	if st := m.Statuses(); len(st) != 0 {
		t.Errorf("plugins running after a cancelled Start: %+v", st)
	}
	if c := children(t); len(c) != 0 {
		t.Errorf("children after a cancelled Start: %v", c)
	}
}

// closeRace calls closeFn from n goroutines at once and returns, for each
// call, its error and the children this process still had when it returned.
func closeRace(t *testing.T, n int, closeFn func() error) {
	t.Helper()
	type result struct {
		err      error
		children []int
	}
	results := make(chan result, n)
	var ready sync.WaitGroup
	ready.Add(n)
	start := make(chan struct{})
	for range n {
		go func() {
			ready.Done()
			<-start
			err := closeFn()
			results <- result{err, children(t)}
		}()
	}
	ready.Wait()
	close(start)
	for range n {
		select {
		case r := <-results:
			if r.err != nil {
				t.Errorf("Close = %v", r.err)
			}
			if len(r.children) != 0 {
				t.Errorf("a Close returned while plugin processes %v were still there", r.children)
			}
		case <-time.After(liveness):
			t.Fatalf("a concurrent Close has not returned after %s", liveness)
		}
	}
}

func TestCloseConcurrently(t *testing.T) {
	p := launch(t, testConfig(t, nil), quietOptions())
	if !slices.Contains(children(t), p.Status().PID) {
		t.Fatalf("plugin %d is not a child of the test", p.Status().PID)
	}
	closeRace(t, 2, p.Close)
	if err := p.Close(); err != nil {
		t.Errorf("a third Close = %v", err)
	}
	if st := p.Status(); st.State != pluginmgr.StateStopped || st.PID != 0 {
		t.Errorf("status after Close = %+v", st)
	}
}

func TestManagerCloseConcurrently(t *testing.T) {
	m := pluginmgr.NewManager(quietOptions())
	configs := twoConfigs(t)
	if err := m.Start(context.Background(), configs); err != nil {
		t.Fatal(err)
	}
	if c := children(t); len(c) != 2 {
		t.Fatalf("children while running: %v, want 2", c)
	}
	closeRace(t, 2, m.Close)
	if err := m.Start(context.Background(), configs[:1]); !errors.Is(err, pluginmgr.ErrClosed) {
		t.Errorf("Start after Close = %v, want ErrClosed", err)
	}
	if c := children(t); len(c) != 0 {
		t.Errorf("Start after Close left children %v", c)
	}
}
