package workload

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	r := Report{Schema: Schema, Env: []EnvVar{{"A", "1"}}, Devices: []Device{{"/dev/gpu0", CharDevice, 195, 0}}, Mounts: []Mount{{"/", "overlay", "overlay", "/"}}}
	line, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		log  string
		want *Report
		err  error
	}{
		{"alone", string(line) + "\n", &r, nil},
		{"among other lines", "starting\n{\"other\":1}\n" + string(line) + "\nenv A=1\n", &r, nil},
		{"no trailing newline", string(line), &r, nil},
		{"none", "env A=1\n{\"schema\":\"something/v9\"}\n", nil, ErrNoReport},
		{"empty", "", nil, ErrNoReport},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.log))
			if !errors.Is(err, tc.err) {
				t.Fatalf("Parse: %v, want %v", err, tc.err)
			}
			if tc.want != nil && !reflect.DeepEqual(got, *tc.want) {
				t.Errorf("Parse = %+v, want %+v", got, *tc.want)
			}
		})
	}
	// A report line that does not decode is an error naming the line.
	if _, err := Parse([]byte("x\n{\"schema\":\"" + Schema + "\",\"env\":7}\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad report: %v", err)
	}
}

func TestCollect(t *testing.T) {
	dev := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dev, "dri"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Real device nodes need root (mknod); the tests run as root here.
	mk := func(p string, mode uint32, major, minor int) {
		t.Helper()
		if err := syscall.Mknod(filepath.Join(dev, p), mode|0o600, major<<8|minor); err != nil {
			t.Fatalf("mknod %s: %v", p, err)
		}
	}
	mk("gpu0", syscall.S_IFCHR, 195, 0)
	mk("dri/card1", syscall.S_IFCHR, 226, 1)
	mk("loop7", syscall.S_IFBLK, 7, 7)
	os.WriteFile(filepath.Join(dev, "not-a-device"), nil, 0o644)
	os.Symlink("gpu0", filepath.Join(dev, "link"))

	mountinfo := filepath.Join(t.TempDir(), "mountinfo")
	os.WriteFile(mountinfo, []byte(strings.Join([]string{
		`22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/a`,
		`23 22 0:22 / /proc rw,nosuid shared:5 master:1 - proc proc rw`,
		`24 22 8:1 /var/run/cdi/with\040space /etc/my\040conf ro - ext4 /dev/vda rw`,
		`garbage`,
		``,
	}, "\n")), 0o644)

	r, err := Collect([]string{"B=2", "A=1=x", "EMPTY="}, dev, mountinfo)
	if err != nil {
		t.Fatal(err)
	}
	want := Report{
		Schema: Schema,
		Env:    []EnvVar{{"A", "1=x"}, {"B", "2"}, {"EMPTY", ""}},
		Devices: []Device{
			{"/dev/dri/card1", CharDevice, 226, 1},
			{"/dev/gpu0", CharDevice, 195, 0},
			{"/dev/loop7", BlockDevice, 7, 7},
		},
		Mounts: []Mount{
			{"/", "overlay", "overlay", "/"},
			{"/proc", "proc", "proc", "/"},
			{"/etc/my conf", "/dev/vda", "ext4", "/var/run/cdi/with space"},
		},
		Errors: []string{mountinfo + `: unparsable line "garbage"`},
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("Collect =\n%+v\nwant\n%+v", r, want)
	}
	if m, ok := r.MountAt("/etc/my conf"); !ok || m.Source != "/dev/vda" {
		t.Errorf("MountAt = %+v, %v", m, ok)
	}

	if _, err := Collect(nil, dev, filepath.Join(dev, "missing")); err == nil {
		t.Error("Collect with no mountinfo succeeded")
	}
}

// TestCollectSelf reads this process's real /dev and mountinfo.
func TestCollectSelf(t *testing.T) {
	r, err := Collect(os.Environ(), "/dev", "/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := r.Device("/dev/null"); !ok || d != (Device{"/dev/null", CharDevice, 1, 3}) {
		t.Errorf("/dev/null = %+v, %v", d, ok)
	}
	if _, ok := r.MountAt("/"); !ok {
		t.Error("no / mount")
	}
	var lines int
	sc := bufio.NewScanner(strings.NewReader(mustMarshal(t, r)))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		lines++
	}
	if lines != 1 {
		t.Errorf("report is %d lines, want 1", lines)
	}
}

func mustMarshal(t *testing.T, r Report) string {
	t.Helper()
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
