package cdi

import (
	"errors"
	"strings"
	"testing"
)

func TestParseQualifiedName(t *testing.T) {
	long := strings.Repeat("a", 300)
	tests := []struct {
		input               string
		vendor, class, name string // want, when valid
		part                NamePart
		offset              int // want, when invalid
		char                rune
	}{
		{input: "nvidia.com/gpu=0", vendor: "nvidia.com", class: "gpu", name: "0"},
		{input: "a/b=c", vendor: "a", class: "b", name: "c"}, // v1.0/v1.1.0 panicked on one-letter parts
		{input: "a.b/c=d", vendor: "a.b", class: "c", name: "d"},
		{input: "x/y=1", vendor: "x", class: "y", name: "1"},
		{input: "vendor.com/class.sub=dev:1_2-3.4", vendor: "vendor.com", class: "class.sub", name: "dev:1_2-3.4"},
		{input: "V_e-n.dor/C_l-a.ss=N", vendor: "V_e-n.dor", class: "C_l-a.ss", name: "N"},
		{input: long + "/" + long + "=" + long, vendor: long, class: long, name: long},

		{input: "", part: PartQualifiedName, offset: -1},
		{input: "/gpu=0", part: PartQualifiedName, offset: -1},
		{input: "nvidia.com/gpu", part: PartQualifiedName, offset: -1},
		{input: "nvidia.com/gpu=", part: PartQualifiedName, offset: -1},
		{input: "nvidia.com=gpu", part: PartQualifiedName, offset: -1},
		{input: "nvidia.com/=0", part: PartQualifiedName, offset: -1},
		{input: "=0", part: PartQualifiedName, offset: -1},
		{input: "a/=b", part: PartQualifiedName, offset: -1},
		{input: "=", part: PartQualifiedName, offset: -1},
		{input: "/", part: PartQualifiedName, offset: -1},
		{input: "1/b=c", part: PartVendor, offset: 0, char: '1'},
		{input: "_/b=c", part: PartVendor, offset: 0, char: '_'},
		{input: "a./b=c", part: PartVendor, offset: 1, char: '.'},
		{input: "a b/c=d", part: PartVendor, offset: 1, char: ' '},
		{input: "ab:c/d=e", part: PartVendor, offset: 2, char: ':'},
		{input: "a/1=c", part: PartClass, offset: 0, char: '1'},
		{input: "a/b-=c", part: PartClass, offset: 1, char: '-'},
		{input: "a/b/c=d", part: PartClass, offset: 1, char: '/'},
		{input: "a/b:c=d", part: PartClass, offset: 1, char: ':'},
		{input: "a/b=c=d", part: PartDevice, offset: 1, char: '='},
		{input: "a/b=c/d", part: PartDevice, offset: 1, char: '/'},
		{input: "a/b=-c", part: PartDevice, offset: 0, char: '-'},
		{input: "a/b=c:", part: PartDevice, offset: 1, char: ':'},
		{input: "a/b=c d", part: PartDevice, offset: 1, char: ' '},
		{input: "é/b=c", part: PartVendor, offset: 0, char: 'é'},
		{input: "aé/b=c", part: PartVendor, offset: 1, char: 'é'},
		{input: "a/b=cé", part: PartDevice, offset: 1, char: 'é'},
		{input: "a/b=c١", part: PartDevice, offset: 1, char: '١'}, // a non-ASCII digit
		{input: "a/b=c\xff", part: PartDevice, offset: 1, char: '\uFFFD'},
		{input: "a/b=\x00", part: PartDevice, offset: 0, char: 0},
	}
	for _, tt := range tests {
		t.Run(tt.input, func(t *testing.T) {
			vendor, class, name, err := ParseQualifiedName(tt.input)
			valid := tt.vendor != ""
			if got := IsQualifiedName(tt.input); got != valid {
				t.Errorf("IsQualifiedName = %v, want %v", got, valid)
			}
			if valid {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if vendor != tt.vendor || class != tt.class || name != tt.name {
					t.Fatalf("got (%q, %q, %q), want (%q, %q, %q)", vendor, class, name, tt.vendor, tt.class, tt.name)
				}
				if q := QualifiedName(vendor, class, name); q != tt.input {
					t.Errorf("QualifiedName = %q, want %q", q, tt.input)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, got (%q, %q, %q)", vendor, class, name)
			}
			if vendor != "" || class != "" || name != tt.input {
				t.Errorf("on error got (%q, %q, %q), want (\"\", \"\", input)", vendor, class, name)
			}
			if !errors.Is(err, ErrInvalidName) {
				t.Errorf("errors.Is(err, ErrInvalidName) = false for %v", err)
			}
			var ne *NameError
			if !errors.As(err, &ne) {
				t.Fatalf("error %T is not a *NameError", err)
			}
			if ne.Part != tt.part || ne.Offset != tt.offset || (tt.offset >= 0 && ne.Char != tt.char) {
				t.Errorf("got part %v offset %d char %q, want part %v offset %d char %q (%v)",
					ne.Part, ne.Offset, ne.Char, tt.part, tt.offset, tt.char, err)
			}
			if !strings.Contains(err.Error(), tt.part.String()) {
				t.Errorf("message %q does not name the part %q", err, tt.part)
			}
		})
	}
}

func TestValidatePartNames(t *testing.T) {
	tests := []struct {
		value               string
		vendorOK, deviceOK  bool
		vendorOff, deviceOf int
	}{
		{"a", true, true, -1, -1},
		{"1", false, true, 0, -1},
		{"ab", true, true, -1, -1},
		{"a1", true, true, -1, -1},
		{"a.", false, false, 1, 1},
		{"a:b", false, true, 1, -1},
		{"a::b", false, true, 1, -1},
		{"0:0", false, true, 0, -1},
		{"", false, false, -1, -1},
		{"a/b", false, false, 1, 1},
		{"ab_", false, false, 2, 2},
		{"A-Z", true, true, -1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			check := func(what string, err error, ok bool, off int, part NamePart) {
				t.Helper()
				if (err == nil) != ok {
					t.Fatalf("%s(%q) = %v, want ok=%v", what, tt.value, err, ok)
				}
				if ok {
					return
				}
				var ne *NameError
				if !errors.As(err, &ne) || ne.Part != part || ne.Offset != off {
					t.Fatalf("%s(%q) = %#v, want part %v at offset %d", what, tt.value, err, part, off)
				}
			}
			check("ValidateVendorName", ValidateVendorName(tt.value), tt.vendorOK, tt.vendorOff, PartVendor)
			check("ValidateClassName", ValidateClassName(tt.value), tt.vendorOK, tt.vendorOff, PartClass)
			check("ValidateDeviceName", ValidateDeviceName(tt.value), tt.deviceOK, tt.deviceOf, PartDevice)
		})
	}
}

func TestNameErrorMessage(t *testing.T) {
	_, _, _, err := ParseQualifiedName("nvidia.com/gpu=0 ")
	want := `cdi: invalid qualified device name "nvidia.com/gpu=0 ": device name "0 ": character ' ' at offset 1 must be a letter or digit at the end`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	err = ValidateVendorName("")
	want = `cdi: invalid vendor "" must not be empty`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

func TestParseKind(t *testing.T) {
	tests := []struct {
		kind, vendor, class string
		ok                  bool
	}{
		{"nvidia.com/gpu", "nvidia.com", "gpu", true},
		{"a/b", "a", "b", true},
		{"a/b/c", "", "", false},
		{"a", "", "", false},
		{"/b", "", "", false},
		{"a/", "", "", false},
		{"1/b", "", "", false},
	}
	for _, tt := range tests {
		vendor, class, err := ParseKind(tt.kind)
		if (err == nil) != tt.ok || vendor != tt.vendor || class != tt.class {
			t.Errorf("ParseKind(%q) = %q, %q, %v; want %q, %q, ok=%v", tt.kind, vendor, class, err, tt.vendor, tt.class, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Errorf("ParseKind(%q) error %v does not match ErrInvalidName", tt.kind, err)
		}
	}
}

func TestParseQualifiedNameDoesNotAllocate(t *testing.T) {
	for _, bn := range benchNames {
		allocs := testing.AllocsPerRun(100, func() {
			sinkVendor, sinkClass, sinkName, _ = ParseQualifiedName(bn.input)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per parse, want 0", bn.name, allocs)
		}
	}
}
