package harness

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveCDIErrors(t *testing.T) {
	dir := t.TempDir()
	good := `{"cdiVersion": "0.6.0", "kind": "example.com/gpu", "devices": [{"name": "a", "containerEdits": {"env": ["A=1"]}}]}`
	if err := os.WriteFile(filepath.Join(dir, "good.json"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, "broken.json"), []byte(`{"cdiVersion": "0.6.0", "kind": "nokind"`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir string
		ids       []string
		wantIs    error
		wantText  string
	}{
		{"resolves", dir, []string{"example.com/gpu=a"}, nil, ""},
		{"no ids", dir, nil, ErrUnresolved, "no CDI IDs"},
		{"unknown device", dir, []string{"example.com/gpu=b"}, ErrUnresolved, "example.com/gpu=b"},
		{"unknown vendor", dir, []string{"other.com/gpu=a"}, ErrUnresolved, "other.com/gpu=a"},
		{"broken spec", broken, []string{"example.com/gpu=a"}, nil, "broken.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := ResolveCDI(tt.dir, tt.ids)
			if tt.wantText == "" {
				if err != nil || len(spec.Process.Env) != 1 || spec.Process.Env[0] != "A=1" {
					t.Fatalf("ResolveCDI = %v, %v; want env [A=1]", spec, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("ResolveCDI error %v, want one naming %q", err, tt.wantText)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Fatalf("ResolveCDI error %v is not %v", err, tt.wantIs)
			}
		})
	}
}

func TestRSSBytesOfThisProcess(t *testing.T) {
	rss, err := RSSBytes(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss < 1<<20 {
		t.Fatalf("VmRSS of this test process = %d bytes, implausibly small", rss)
	}
	if _, err := RSSBytes(-1); err == nil {
		t.Fatal("RSSBytes(-1) succeeded")
	}
}

func TestSimulatedGPUEnv(t *testing.T) {
	for _, tc := range []struct{ driver, device, want string }{
		{"gpu.example.com", "gpu-0", "GPU_DEVICE_GPU_EXAMPLE_COM_0"},
		{"gpu2.example.com", "gpu-12", "GPU_DEVICE_GPU2_EXAMPLE_COM_12"},
		{"my-gpu.Example.org", "gpu-3", "GPU_DEVICE_MY_GPU_EXAMPLE_ORG_3"},
	} {
		if got := SimulatedGPUEnv(tc.driver, tc.device); got != tc.want {
			t.Errorf("SimulatedGPUEnv(%q, %q) = %s, want %s", tc.driver, tc.device, got, tc.want)
		}
	}
}
