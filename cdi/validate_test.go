package cdi

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

func validSpec() *Spec {
	return &Spec{
		Version: "0.3.0",
		Kind:    "gpu.example.com/gpu",
		Devices: []Device{{Name: "gpu0", ContainerEdits: ContainerEdits{Env: []string{"GPU=0"}}}},
	}
}

func TestValidate(t *testing.T) {
	mode := os.FileMode(0o666)
	tests := []struct {
		name   string
		mutate func(*Spec)
		paths  []string // problem paths, in order; nil for a valid spec
	}{
		{"valid", func(*Spec) {}, nil},
		{"version with v", func(s *Spec) { s.Version = "v0.3.0" }, nil},
		{"full device node", func(s *Spec) {
			s.Devices[0].ContainerEdits.DeviceNodes = []DeviceNode{{Path: "/dev/x", Type: "b", Permissions: "rwm", FileMode: &mode}}
		}, nil},
		{"none permissions", func(s *Spec) {
			s.ContainerEdits.DeviceNodes = []DeviceNode{{Path: "/dev/x", Permissions: "none"}}
		}, nil},
		{"closID root", func(s *Spec) { s.Version = "0.7.0"; s.ContainerEdits.IntelRdt = &IntelRdt{ClosID: "/"} }, nil},
		{"every hook name", func(s *Spec) {
			for _, h := range HookNames() {
				s.ContainerEdits.Hooks = append(s.ContainerEdits.Hooks, Hook{HookName: h, Path: "/bin/true"})
			}
		}, nil},

		{"unknown version", func(s *Spec) { s.Version = "0.9.0" }, []string{"cdiVersion"}},
		{"released but older than any spec", func(s *Spec) { s.Version = "0.2.0" }, []string{"cdiVersion"}},
		{"empty version", func(s *Spec) { s.Version = "" }, []string{"cdiVersion"}},
		{"version too old", func(s *Spec) { s.Devices[0].Name = "0" }, []string{"cdiVersion"}},
		{"bad kind", func(s *Spec) { s.Kind = "gpu" }, []string{"kind"}},
		{"bad vendor", func(s *Spec) { s.Kind = "-x/gpu" }, []string{"kind"}},
		{"no devices", func(s *Spec) { s.Devices = nil }, []string{"devices"}},
		{"bad device name", func(s *Spec) { s.Devices[0].Name = "a b" }, []string{"devices[0].name"}},
		{"duplicate device", func(s *Spec) { s.Devices = append(s.Devices, s.Devices[0]) }, []string{"devices[1].name"}},
		{"empty device edits", func(s *Spec) { s.Devices[0].ContainerEdits = ContainerEdits{} }, []string{"devices[0].containerEdits"}},
		{"bad env", func(s *Spec) { s.Devices[0].ContainerEdits.Env = []string{"A=1", "=1", "B"} },
			[]string{"devices[0].containerEdits.env[1]", "devices[0].containerEdits.env[2]"}},
		{"device node", func(s *Spec) {
			s.Devices[0].ContainerEdits.DeviceNodes = []DeviceNode{{Type: "x", Permissions: "rwx"}}
		}, []string{"devices[0].containerEdits.deviceNodes[0].path", "devices[0].containerEdits.deviceNodes[0].type",
			"devices[0].containerEdits.deviceNodes[0].permissions"}},
		{"hook", func(s *Spec) {
			s.ContainerEdits.Hooks = []Hook{{HookName: "preStart", Env: []string{"x"}}}
		}, []string{"containerEdits.hooks[0].hookName", "containerEdits.hooks[0].path", "containerEdits.hooks[0].env[0]"}},
		{"mount", func(s *Spec) { s.ContainerEdits.Mounts = []Mount{{}} },
			[]string{"containerEdits.mounts[0].hostPath", "containerEdits.mounts[0].containerPath"}},
		{"closID", func(s *Spec) { s.Version = "0.7.0"; s.ContainerEdits.IntelRdt = &IntelRdt{ClosID: ".."} },
			[]string{"containerEdits.intelRdt.closID"}},
		{"net devices", func(s *Spec) {
			s.Version = "1.1.0"
			s.ContainerEdits.NetDevices = []NetDevice{{"eth0", "net0"}, {"eth0", "net1"}, {"eth1", "net1"}, {"", ""}}
		}, []string{"containerEdits.netDevices[1].hostInterfaceName", "containerEdits.netDevices[2].name",
			"containerEdits.netDevices[3].hostInterfaceName", "containerEdits.netDevices[3].name"}},
		{"many at once", func(s *Spec) {
			s.Version = "2.0.0"
			s.Kind = "a/b/c"
			s.Devices = append(s.Devices, Device{Name: ""})
		}, []string{"cdiVersion", "kind", "devices[1].name", "devices[1].containerEdits"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.mutate(s)
			err := s.Validate()
			if tt.paths == nil {
				if err != nil {
					t.Fatalf("valid spec rejected: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("got %v, want an error matching ErrInvalidSpec", err)
			}
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *SpecError", err)
			}
			var paths []string
			for _, p := range se.Problems {
				paths = append(paths, p.Path)
				if !strings.Contains(err.Error(), p.Path+": ") {
					t.Errorf("message %q misses problem path %q", err, p.Path)
				}
			}
			if !slices.Equal(paths, tt.paths) {
				t.Errorf("problem paths %q, want %q\n(%v)", paths, tt.paths, err)
			}
		})
	}
}

func TestMinimumVersion(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Spec)
		want   string
	}{
		{"plain", func(*Spec) {}, "0.3.0"},
		{"mount type", func(s *Spec) { s.Devices[0].ContainerEdits.Mounts = []Mount{{Type: "tmpfs"}} }, "0.4.0"},
		{"mount type in the first of two devices", func(s *Spec) {
			s.Devices[0].ContainerEdits.Mounts = []Mount{{Type: "tmpfs"}}
			s.Devices = append(s.Devices, Device{Name: "gpu1"})
		}, "0.4.0"},
		{"host path in the first of two devices", func(s *Spec) {
			s.Devices[0].ContainerEdits.DeviceNodes = []DeviceNode{{HostPath: "/x"}}
			s.Devices = append(s.Devices, Device{Name: "gpu1"})
		}, "0.5.0"},
		{"host path", func(s *Spec) { s.ContainerEdits.DeviceNodes = []DeviceNode{{HostPath: "/x"}} }, "0.5.0"},
		{"digit device name", func(s *Spec) { s.Devices[0].Name = "0" }, "0.5.0"},
		{"spec annotations", func(s *Spec) { s.Annotations = map[string]string{"a": "b"} }, "0.6.0"},
		{"device annotations", func(s *Spec) { s.Devices[0].Annotations = map[string]string{"a": "b"} }, "0.6.0"},
		{"dot in class", func(s *Spec) { s.Kind = "a/b.c" }, "0.6.0"},
		{"dot in vendor only", func(s *Spec) { s.Kind = "a.b/c" }, "0.3.0"},
		{"intelRdt", func(s *Spec) { s.Devices[0].ContainerEdits.IntelRdt = &IntelRdt{} }, "0.7.0"},
		{"gids", func(s *Spec) { s.ContainerEdits.AdditionalGIDs = []uint32{1} }, "0.7.0"},
		{"empty schemata", func(s *Spec) { s.ContainerEdits.IntelRdt = &IntelRdt{Schemata: []string{}} }, "1.1.0"},
		{"monitoring", func(s *Spec) { s.Devices[0].ContainerEdits.IntelRdt = &IntelRdt{EnableMonitoring: true} }, "1.1.0"},
		{"net devices", func(s *Spec) { s.Devices[0].ContainerEdits.NetDevices = []NetDevice{{"a", "b"}} }, "1.1.0"},
		{"highest wins", func(s *Spec) {
			s.Devices[0].Name = "0"
			s.ContainerEdits.NetDevices = []NetDevice{{"a", "b"}}
		}, "1.1.0"},
	}
	for _, tt := range tests {
		s := validSpec()
		tt.mutate(s)
		if got := MinimumVersion(s); got != tt.want {
			t.Errorf("%s: MinimumVersion = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestKnownVersions(t *testing.T) {
	v := KnownVersions()
	if v[0] != "0.1.0" || v[len(v)-1] != CurrentVersion || !slices.Contains(v, EarliestVersion) {
		t.Fatalf("KnownVersions = %q", v)
	}
	v[0] = "changed"
	if KnownVersions()[0] != "0.1.0" {
		t.Errorf("KnownVersions returns the package's own slice")
	}
}
