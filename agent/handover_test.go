package agent

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstanceSocketNames(t *testing.T) {
	for _, tc := range []struct {
		id, reg, dra string
	}{
		{"", "/reg/gpu.example.com-reg.sock", "/plugins/gpu.example.com/dra.sock"},
		{"0b7e4c2a-1f3d-4e5a-9c8b-123456789abc", "/reg/gpu.example.com-0b7e4c2a-1f3d-4e5a-9c8b-123456789abc-reg.sock", "/plugins/gpu.example.com/dra-0b7e4c2a-1f3d-4e5a-9c8b-123456789abc.sock"},
	} {
		if got := RegistrationSocketFor("/reg", "gpu.example.com", tc.id); got != tc.reg {
			t.Errorf("RegistrationSocketFor(%q) = %q, want %q", tc.id, got, tc.reg)
		}
		if got := DRASocketFor("/plugins", "gpu.example.com", tc.id); got != tc.dra {
			t.Errorf("DRASocketFor(%q) = %q, want %q", tc.id, got, tc.dra)
		}
	}
}

// Stale-socket cleanup touches only names this driver's instances use.
func TestOwnedSocketNames(t *testing.T) {
	const uid = "0b7e4c2a-1f3d-4e5a-9c8b-123456789abc"
	for _, tc := range []struct {
		base string
		want bool
	}{
		{"gpu.example.com-reg.sock", true},
		{"gpu.example.com-" + uid + "-reg.sock", true},
		{"gpu.example.com-instance1-reg.sock", true},
		{"dra.sock", true},
		{"dra-" + uid + ".sock", true},
		{"gpu.example.com-other-driver-reg.sock", false}, // driver "gpu.example.com-other-driver"? not a UID
		{"other.example.com-reg.sock", false},
		{"dra-../x.sock", false},
	} {
		if got := ownedName(tc.base, "gpu.example.com"); got != tc.want {
			t.Errorf("ownedName(%q) = %v, want %v", tc.base, got, tc.want)
		}
	}
}

func TestInstanceIDValidated(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"", true},
		{"0b7e4c2a-1f3d-4e5a-9c8b-123456789abc", true},
		{"a/b", false},
		{"..", false},
		{string(make([]byte, 64)), false},
	} {
		cfg := DefaultConfig()
		cfg.NodeName = "node-a"
		cfg.Slices.DryRunDir, cfg.Claims.Dir = "/dry-run", "/claims"
		cfg.Kubelet.InstanceID = tc.id
		err := cfg.Validate()
		var ce *ConfigError
		switch {
		case tc.ok && errors.As(err, &ce) && ce.Key == "kubelet.instanceID":
			t.Errorf("instanceID %q refused: %v", tc.id, err)
		case !tc.ok && (!errors.As(err, &ce) || ce.Key != "kubelet.instanceID"):
			t.Errorf("instanceID %q: error %v, want a ConfigError for kubelet.instanceID", tc.id, err)
		}
	}
}

func TestSocketPathTooLongRefused(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, strings.Repeat("x", MaxSocketPath-len(dir)))
	if _, err := listenUnix(long); !errors.Is(err, ErrSocketPathTooLong) || !strings.Contains(err.Error(), long) {
		t.Fatalf("listenUnix(%d bytes) = %v, want ErrSocketPathTooLong naming the path", len(long), err)
	}
	ok := filepath.Join(dir, "s.sock")
	lis, err := listenUnix(ok)
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
}
