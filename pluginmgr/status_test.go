package pluginmgr_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/internal/testbin"
)

// TestPrepareStatus: a device status (KEP-4817) a plugin returns crosses the
// wire whole, and a plugin that sets none gives nil.
func TestPrepareStatus(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name   string
		status bool
	}{
		{"with status", true},
		{"without status", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := launch(t, testConfig(t, map[string]any{"status": tt.status}), quietOptions())
			results, err := p.Prepare(ctx, []pluginmgr.Claim{claimFor("a", "dev1")})
			if err != nil {
				t.Fatal(err)
			}
			if len(results) != 1 || results[0].Err != nil || len(results[0].Devices) != 1 {
				t.Fatalf("results = %+v", results)
			}
			st := results[0].Devices[0].Status
			if !tt.status {
				if st != nil {
					t.Fatalf("status %+v from a plugin that sets none", st)
				}
				return
			}
			if st == nil {
				t.Fatal("no status")
			}
			if len(st.Conditions) != 1 || st.Conditions[0].Type != "Ready" || st.Conditions[0].Status != metav1.ConditionTrue ||
				st.Conditions[0].LastTransitionTime.Unix() != 1700000000 {
				t.Errorf("conditions = %+v", st.Conditions)
			}
			if st.Data == nil || string(st.Data.Raw) != `{"device":"dev1"}` {
				t.Errorf("data = %+v", st.Data)
			}
			if st.NetworkData == nil || st.NetworkData.InterfaceName != "net-dev1" || len(st.NetworkData.IPs) != 1 || st.NetworkData.IPs[0] != "10.9.8.7/24" {
				t.Errorf("networkData = %+v", st.NetworkData)
			}
			// Unprepare hands the devices back, status and all, and the
			// plugin decodes them.
			un, err := p.Unprepare(ctx, []pluginmgr.PreparedClaim{{UID: "a", Devices: results[0].Devices}})
			if err != nil || len(un) != 1 || un[0].Err != nil {
				t.Fatalf("Unprepare = %+v, %v", un, err)
			}
		})
	}
}

// TestReleasedPluginWithoutStatus: a plugin built from the released v0.1.0
// protocol, which has no status field, still prepares through today's host;
// its devices simply have no status.
func TestReleasedPluginWithoutStatus(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	repo := strings.TrimSpace(string(top))
	src := t.TempDir()
	for _, ref := range []struct{ tag, dir string }{{"pluginmgr/v0.1.0", "pluginmgr"}, {"inventory/v0.1.0", "inventory"}} {
		if err := exec.Command("git", "-C", repo, "rev-parse", "--verify", "--quiet", ref.tag).Run(); err != nil {
			t.Skipf("tag %s is not in this clone", ref.tag)
		}
		archive, err := exec.Command("git", "-C", repo, "archive", ref.tag, ref.dir).Output()
		if err != nil {
			t.Fatalf("git archive %s: %v", ref.tag, err)
		}
		untar(t, archive, src)
	}
	if _, err := os.Stat(filepath.Join(src, "pluginmgr", "proto", "dranode", "plugin", "v1", "plugin.pb.go")); err != nil {
		t.Fatal(err)
	}
	old, err := testbin.BuildIn(filepath.Join(src, "pluginmgr"), t.TempDir(), "hello-v0.1.0", "./internal/hellodriver")
	if err != nil {
		t.Fatal(err)
	}
	cfg := pluginmgr.PluginConfig{Name: "hello", Path: old, SHA256: testbin.SHA256(old)}
	p := launch(t, cfg, quietOptions())
	claim := pluginmgr.Claim{UID: "c1", Namespace: "default", Name: "c1",
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "r", Driver: "hello.example.com", Pool: "pool-a", Device: "hello-0"}}}
	results, err := p.Prepare(context.Background(), []pluginmgr.Claim{claim})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || results[0].Err != nil || len(results[0].Devices) != 1 {
		t.Fatalf("results = %+v", results)
	}
	if d := results[0].Devices[0]; d.Status != nil || d.Device != "hello-0" || len(d.Edits.Env) != 1 {
		t.Errorf("device from the v0.1.0 plugin = %+v, want hello-0 with its edits and no status", d)
	}
}

func untar(t *testing.T, archive []byte, dir string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(path, data, 0o644)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
