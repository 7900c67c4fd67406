package loopdev

import (
	"strconv"
	"strings"
	"testing"
)

// The sysfs parsers see whatever the kernel (or a stale mount) prints:
// they must never panic, and what they accept must print back the same.
func FuzzParseDev(f *testing.F) {
	for _, s := range []string{"7:0\n", "7:1048575", "259:3\n", ":", "7:", "-1:2", "07:00\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ma, mi, err := ParseDev(s)
		if err != nil {
			return
		}
		a, b, _ := strings.Cut(strings.TrimSuffix(s, "\n"), ":")
		if x, _ := strconv.ParseUint(a, 10, 64); x != uint64(ma) {
			t.Fatalf("ParseDev(%q) major %d", s, ma)
		}
		if y, _ := strconv.ParseUint(b, 10, 64); y != uint64(mi) {
			t.Fatalf("ParseDev(%q) minor %d", s, mi)
		}
	})
}

func FuzzParseUint(f *testing.F) {
	for _, s := range []string{"0\n", "8192\n", "18446744073709551616", "+1", " 1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseUint(s)
		if err != nil {
			return
		}
		if strconv.FormatUint(n, 10) != strings.TrimLeft(strings.TrimSuffix(s, "\n"), "0") && n != 0 {
			t.Fatalf("ParseUint(%q) = %d", s, n)
		}
	})
}

func FuzzParseBackingFile(f *testing.F) {
	for _, s := range []string{"/var/lib/dranode/loop/disk-0.img\n", "/a (deleted)\n", "/a (deleted) (deleted)\n", "\n", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, deleted := ParseBackingFile(s)
		back := p
		if deleted {
			back += deletedSuffix
		}
		if back != strings.TrimSuffix(s, "\n") {
			t.Fatalf("ParseBackingFile(%q) = %q, %v", s, p, deleted)
		}
	})
}
