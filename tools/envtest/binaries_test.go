package envtest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// The constants name the cache directory the build script fills; they must
// be the versions its go.mod files pin.
func TestVersionsMatchBuildModules(t *testing.T) {
	for _, tc := range []struct {
		gomod, module, want string
	}{
		{"../../build/controlplane/go.mod", "k8s.io/kubernetes", KubernetesVersion},
		{"../../build/controlplane/go.mod", "go.etcd.io/etcd/server/v3", EtcdVersion},
	} {
		data, err := os.ReadFile(tc.gomod)
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(tc.module) + `\s+(v\S+)`)
		m := re.FindSubmatch(data)
		if m == nil {
			t.Fatalf("%s: no requirement on %s", tc.gomod, tc.module)
		}
		if got := string(m[1]); got != tc.want {
			t.Errorf("%s requires %s %s, envtest expects %s", tc.gomod, tc.module, got, tc.want)
		}
	}
}

// The script and DefaultBinaryDir must agree on where the binaries are.
func TestScriptAndDefaultBinaryDirAgree(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(BinaryDirEnv, "")
	out, err := exec.Command("../../scripts/build-controlplane.sh", "--print-dir").Output()
	if err != nil {
		t.Fatalf("build-controlplane.sh --print-dir: %v", err)
	}
	dir, source, err := DefaultBinaryDir()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != dir {
		t.Errorf("script builds into %s, DefaultBinaryDir looks in %s", got, dir)
	}
	want := filepath.Join(cache, "dranode", "controlplane", CacheKey(runtime.Version()))
	if dir != want || source != "build cache" {
		t.Errorf("DefaultBinaryDir = %s (%s), want %s (build cache)", dir, source, want)
	}
}

func TestDefaultBinaryDirPrefersEnvironmentVariable(t *testing.T) {
	t.Setenv(BinaryDirEnv, "/opt/prebuilt")
	dir, source, err := DefaultBinaryDir()
	if err != nil || dir != "/opt/prebuilt" || source != "$"+BinaryDirEnv {
		t.Errorf("DefaultBinaryDir = %q, %q, %v; want /opt/prebuilt from $%s", dir, source, err, BinaryDirEnv)
	}
}

// Binaries built by another Go version are still these versions of the
// control plane.
func TestDefaultBinaryDirFallsBackToOtherGoVersion(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(BinaryDirEnv, "")
	other := filepath.Join(cache, "dranode", "controlplane", CacheKey("go1.0.1"))
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, _, err := DefaultBinaryDir()
	if err != nil || dir != other {
		t.Errorf("DefaultBinaryDir = %q, %v; want %q", dir, err, other)
	}
}

func writeExecutable(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 1\n"), mode); err != nil {
		t.Fatal(err)
	}
}

func TestMissingBinariesFailWithWhereAndHow(t *testing.T) {
	for _, tc := range []struct {
		name        string
		setup       func(t *testing.T, dir string) // fills the binary directory
		viaEnv      bool                           // pass the directory through $DRANODE_CONTROLPLANE_BIN
		scheduler   bool
		kcm         bool
		wantBinary  string
		wantInError string
	}{
		{name: "empty directory", setup: func(*testing.T, string) {}, wantBinary: EtcdBinary, wantInError: "no such file"},
		{name: "empty directory from env", setup: func(*testing.T, string) {}, viaEnv: true, wantBinary: EtcdBinary, wantInError: "$" + BinaryDirEnv},
		{
			name: "apiserver not executable",
			setup: func(t *testing.T, dir string) {
				writeExecutable(t, filepath.Join(dir, EtcdBinary), 0o755)
				writeExecutable(t, filepath.Join(dir, APIServerBinary), 0o644)
			},
			wantBinary: APIServerBinary, wantInError: "not executable",
		},
		{
			name: "scheduler missing only when asked for",
			setup: func(t *testing.T, dir string) {
				writeExecutable(t, filepath.Join(dir, EtcdBinary), 0o755)
				writeExecutable(t, filepath.Join(dir, APIServerBinary), 0o755)
			},
			scheduler: true, wantBinary: SchedulerBinary, wantInError: "no such file",
		},
		{
			name: "controller manager missing only when asked for",
			setup: func(t *testing.T, dir string) {
				for _, b := range []string{EtcdBinary, APIServerBinary, SchedulerBinary} {
					writeExecutable(t, filepath.Join(dir, b), 0o755)
				}
			},
			scheduler: true, kcm: true, wantBinary: ControllerManagerBinary, wantInError: "no such file",
		},
		{
			name: "directory instead of file",
			setup: func(t *testing.T, dir string) {
				if err := os.Mkdir(filepath.Join(dir, EtcdBinary), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantBinary: EtcdBinary, wantInError: "not a regular file",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			env := &Environment{Scheduler: tc.scheduler, ControllerManager: tc.kcm}
			if tc.viaEnv {
				t.Setenv(BinaryDirEnv, dir)
			} else {
				env.BinaryDir = dir
			}
			cfg, err := env.Start()
			if err == nil {
				env.Stop()
				t.Fatalf("Start succeeded with %s", dir)
			}
			if cfg != nil {
				t.Errorf("Start returned a config with error %v", err)
			}
			if !errors.Is(err, ErrBinariesNotFound) {
				t.Errorf("errors.Is(%v, ErrBinariesNotFound) = false", err)
			}
			var be *BinaryError
			if !errors.As(err, &be) {
				t.Fatalf("error %T is not a *BinaryError", err)
			}
			if be.Binary != tc.wantBinary || be.Dir != dir {
				t.Errorf("BinaryError names %s in %s, want %s in %s", be.Binary, be.Dir, tc.wantBinary, dir)
			}
			msg := err.Error()
			for _, want := range []string{dir, "make controlplane", BinaryDirEnv, tc.wantInError} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not mention %q", msg, want)
				}
			}
			if env.Dir() != "" {
				t.Errorf("a temporary directory %s was made before the binaries were checked", env.Dir())
			}
			if err := env.Stop(); err != nil {
				t.Errorf("Stop after a failed Start: %v", err)
			}
		})
	}
}

func TestStartTwice(t *testing.T) {
	env := &Environment{BinaryDir: t.TempDir()}
	if _, err := env.Start(); !errors.Is(err, ErrBinariesNotFound) {
		t.Fatalf("first Start: %v", err)
	}
	if _, err := env.Start(); !errors.Is(err, ErrAlreadyStarted) {
		t.Errorf("second Start = %v, want ErrAlreadyStarted", err)
	}
}

func TestAuditEventsWithoutAudit(t *testing.T) {
	env := &Environment{}
	if _, err := env.AuditEvents(); !errors.Is(err, ErrAuditDisabled) {
		t.Errorf("AuditEvents = %v, want ErrAuditDisabled", err)
	}
}

func TestReadAuditLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	full := `{"stage":"ResponseComplete","verb":"create","user":{"username":"admin"},"objectRef":{"resource":"resourceslices","apiGroup":"resource.k8s.io","name":"a"},"responseStatus":{"code":201}}` + "\n"
	for _, tc := range []struct {
		name    string
		content string
		want    int
		wantErr bool
	}{
		{"one event", full, 1, false},
		{"partial last line ignored", full + `{"stage":"Resp`, 1, false},
		{"only partial line", `{"stage":"Resp`, 0, false},
		{"corrupt line", full + "not json\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			events, err := readAuditLog(path)
			if (err != nil) != tc.wantErr {
				t.Fatalf("readAuditLog: %v, want error %v", err, tc.wantErr)
			}
			if len(events) != tc.want {
				t.Fatalf("got %d events, want %d", len(events), tc.want)
			}
			if tc.want > 0 {
				ev := events[0]
				if ev.Verb != "create" || ev.User.Username != "admin" || ev.ObjectRef.Resource != "resourceslices" || ev.ResponseStatus.Code != 201 {
					t.Errorf("decoded %+v", ev)
				}
			}
		})
	}
}
