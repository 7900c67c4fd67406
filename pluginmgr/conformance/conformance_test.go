package conformance_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/conformance"
	"github.com/dranode/dranode/pluginmgr/internal/testbin"
)

// The test plugins: one that keeps the contract and one that breaks it.
var goodPlugin, brokenPlugin string

func TestMain(m *testing.M) {
	testbin.Main(m, map[string]*string{
		"../internal/testdriver/cmd/testdriver": &goodPlugin,
		"./testdata/brokenplugin":               &brokenPlugin,
	})
}

func launch(t *testing.T, path string, config ...byte) *pluginmgr.Plugin {
	t.Helper()
	p, err := pluginmgr.Launch(context.Background(), pluginmgr.PluginConfig{Path: path, SHA256: testbin.SHA256(path), Config: config},
		pluginmgr.Options{Logger: hclog.NewNullLogger(), StartTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// recorder is a testing.TB that collects failures instead of failing the
// real test, so the kit's verdict on a broken plugin can be checked.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	messages []string
	failed   bool
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.messages = append(r.messages, fmt.Sprintf(format, args...))
	r.failed = true
}
func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fail() {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}
func (r *recorder) FailNow() { r.Fail(); runtime.Goexit() }
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// record runs the kit on p with a recorder; t may be nil outside a test
// (the kit calls only the methods the recorder implements).
func record(t testing.TB, p *pluginmgr.Plugin) *recorder {
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		conformance.Run(rec, p, conformance.Options{})
	}()
	<-done
	return rec
}

func TestGoodPluginPasses(t *testing.T) {
	for _, config := range []string{"", `{"status":true}`, `{"shared":true}`} {
		t.Run("config="+config, func(t *testing.T) {
			rec := record(t, launch(t, goodPlugin, []byte(config)...))
			if rec.Failed() {
				t.Errorf("the kit failed a conforming plugin:\n%s", strings.Join(rec.messages, "\n"))
			}
		})
	}
}

func TestBrokenPluginFails(t *testing.T) {
	rec := record(t, launch(t, brokenPlugin))
	all := strings.Join(rec.messages, "\n")
	for _, want := range []string{
		`Info: driver version is empty`,
		`Info: opaque config kind "NotAKind": want group/version/Kind`,
		// inventory.Validate's findings, one message each with the field.
		`inventory: pools[0].devices[0].name: a lowercase RFC 1123 label`,
		`inventory: pools[0].devices[0].attributes["both"]: exactly one value must be set, found 2`,
		`inventory: pools[0].devices[0].attributes["bad.domain_/x"]: a lowercase RFC 1123 subdomain`,
		`inventory: pools[0].devices[0].attributes["version"].version: "1.2" is not a semantic version`,
		`identifier "this_identifier_is_far_too_long_x" longer than 32 characters`,
		`inventory: pools[0].devices[0]: 34 attributes and capacities, at most 32 allowed`,
		`inventory: pools[0].devices[2].name: duplicate device name "gpu-1"`,
		`inventory: pools[0].devices[1].consumesCounters[0].counterSet: no counter set "missing"`,
		`Prepare is not idempotent`,
		`env entry "NOEQUALS" is not NAME=VALUE`,
		`device node path "dev/gpu0" is not absolute`,
		`Unprepare of a claim never prepared`,
		`status: condition 0: type, reason and lastTransitionTime are required`,
		`status: condition 0: status "Yes", want True, False or Unknown`,
		`status: data is not a JSON object: "[1]"`,
		`status: networkData.ips: "10.0.0.1" is not in CIDR notation`,
		`Prepare with admin access of a device another claim holds of claim`,
		`Prepare of claim two-shares with 2 shares of node/gpu-2: share`,
		`answered 0 times, want once (PreparedDevice.ShareID; each share gets its own CDI device)`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the kit did not report %q; it reported:\n%s", want, all)
		}
	}
	for _, m := range rec.messages {
		if !strings.HasPrefix(m, "conformance: ") {
			t.Errorf("message without the conformance prefix: %q", m)
		}
	}
}
