package cdi

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const testClaimUID = "0f3c2a9e-7b1d-4c3e-9f8a-2b6d5e4c1a00"

func TestAnnotationKey(t *testing.T) {
	tests := []struct {
		driver, deviceID string
		want             string // "" when an error is expected
	}{
		{"gpu.example.com", testClaimUID, "cdi.k8s.io/gpu.example.com_" + testClaimUID},
		{"a", "b", "cdi.k8s.io/a_b"},
		{"drv", "pool/dev", "cdi.k8s.io/drv_pool_dev"},
		{strings.Repeat("d", 26), testClaimUID, "cdi.k8s.io/" + strings.Repeat("d", 26) + "_" + testClaimUID}, // exactly 63
		{strings.Repeat("d", 27), testClaimUID, ""},                                                           // 64
		{"", "x", ""},
		{"x", "", ""},
		{"-drv", "x", ""},
		{"drv", "x-", ""},
		{"drv", "x y", ""},
		{"drv", "é", ""},
	}
	for _, tt := range tests {
		key, err := AnnotationKey(tt.driver, tt.deviceID)
		if tt.want == "" {
			if err == nil {
				t.Errorf("AnnotationKey(%q, %q) = %q, want an error", tt.driver, tt.deviceID, key)
			} else if !errors.Is(err, ErrInvalidAnnotation) {
				t.Errorf("AnnotationKey(%q, %q) error %v does not match ErrInvalidAnnotation", tt.driver, tt.deviceID, err)
			}
			continue
		}
		if err != nil || key != tt.want {
			t.Errorf("AnnotationKey(%q, %q) = %q, %v; want %q", tt.driver, tt.deviceID, key, err, tt.want)
		}
	}
	_, err := AnnotationKey(strings.Repeat("d", 27), testClaimUID)
	if err == nil || !strings.Contains(err.Error(), "64 characters, longer than 63") {
		t.Errorf("too-long error should give the lengths: %v", err)
	}
}

func TestClaimAnnotationKey(t *testing.T) {
	long := "very-long-driver-name.accelerators.example.com" // 46 characters
	longer := strings.Repeat("x", 80) + ".example.com"
	short, err := ClaimAnnotationKey("gpu.example.com", testClaimUID)
	if err != nil || short != "cdi.k8s.io/gpu.example.com_"+testClaimUID {
		t.Fatalf("a key that fits must be the plain one, got %q, %v", short, err)
	}
	seen := map[string]string{}
	for _, driver := range []string{long, longer, long + "-"} {
		for _, uid := range []string{testClaimUID, "11111111-2222-3333-4444-555555555555"} {
			key, err := ClaimAnnotationKey(driver, uid)
			if err != nil {
				t.Fatalf("ClaimAnnotationKey(%q, %q): %v", driver, uid, err)
			}
			if n := len(strings.TrimPrefix(key, AnnotationPrefix)); n > MaxAnnotationNameLength {
				t.Errorf("key %q has a %d-character name part", key, n)
			}
			if again, _ := ClaimAnnotationKey(driver, uid); again != key {
				t.Errorf("not stable: %q then %q", key, again)
			}
			if other, dup := seen[key]; dup {
				t.Errorf("key %q for both %s and %s", key, other, driver+"/"+uid)
			}
			seen[key] = driver + "/" + uid
			if !strings.HasSuffix(key, "_"+ShortDeviceID(driver, uid)) {
				t.Errorf("key %q does not end in the short device ID", key)
			}
		}
	}
	if _, err := ClaimAnnotationKey("-"+strings.Repeat("x", 70), testClaimUID); !errors.Is(err, ErrInvalidAnnotation) {
		t.Errorf("an invalid long driver name must still be rejected, got %v", err)
	}
}

func TestShortDeviceID(t *testing.T) {
	a := ShortDeviceID("ab", "c")
	if len(a) != 16 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Fatalf("ShortDeviceID = %q, want 16 hex digits", a)
	}
	// Pinned: keys must not change between releases, or a restarted agent
	// would not find the annotations it wrote. The value is from
	//   printf 'accelerator-driver.compute.example.com\0000f3c2a9e-7b1d-4c3e-9f8a-2b6d5e4c1a00' | sha256sum
	if got := ShortDeviceID("accelerator-driver.compute.example.com", testClaimUID); got != "f12c6bc24f393ae5" {
		t.Errorf("ShortDeviceID changed: %s", got)
	}
	if b := ShortDeviceID("a", "bc"); a == b {
		t.Errorf("(ab, c) and (a, bc) share ID %q", a)
	}
}

func TestAnnotationValueAndUpdate(t *testing.T) {
	devices := []string{"gpu.example.com/gpu=0", "gpu.example.com/gpu=1"}
	v, err := AnnotationValue(devices)
	if err != nil || v != "gpu.example.com/gpu=0,gpu.example.com/gpu=1" {
		t.Fatalf("AnnotationValue = %q, %v", v, err)
	}
	if _, err := AnnotationValue(nil); !errors.Is(err, ErrInvalidAnnotation) {
		t.Errorf("empty device list: got %v", err)
	}
	_, err = AnnotationValue([]string{"gpu.example.com/gpu=0", "bad"})
	var ne *NameError
	if !errors.Is(err, ErrInvalidAnnotation) || !errors.As(err, &ne) || ne.Input != "bad" {
		t.Errorf("bad device: got %v, want an annotation error wrapping a *NameError for %q", err, "bad")
	}

	ann, err := UpdateAnnotations(nil, "gpu.example.com", testClaimUID, devices)
	if err != nil || len(ann) != 1 {
		t.Fatalf("UpdateAnnotations = %v, %v", ann, err)
	}
	if _, err := UpdateAnnotations(ann, "gpu.example.com", testClaimUID, devices); !errors.Is(err, ErrInvalidAnnotation) {
		t.Errorf("second update of one key: got %v, want an error", err)
	}
	before := len(ann)
	if _, err := UpdateAnnotations(ann, "gpu.example.com", "other", []string{"x"}); err == nil || len(ann) != before {
		t.Errorf("failed update must leave the map alone: %v, %v", err, ann)
	}
}

func TestParseAnnotations(t *testing.T) {
	ann := map[string]string{
		"cdi.k8s.io/b_2":   "v.com/c=z,v.com/c=a,v.com/c=z",
		"cdi.k8s.io/a_1":   "v.com/c=m",
		"cdi.k8s.io/c_3":   "v.com/c=a",
		"other.io/ignored": "not a device",
	}
	for range 20 { // map order must not matter
		keys, devices, err := ParseAnnotations(ann)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"cdi.k8s.io/a_1", "cdi.k8s.io/b_2", "cdi.k8s.io/c_3"}; !slices.Equal(keys, want) {
			t.Fatalf("keys %q, want %q", keys, want)
		}
		if want := []string{"v.com/c=a", "v.com/c=m", "v.com/c=z"}; !slices.Equal(devices, want) {
			t.Fatalf("devices %q, want %q", devices, want)
		}
	}
	for _, bad := range []string{"", "v.com/c=a,", "v.com/c=a, v.com/c=b", "v.com/c"} {
		_, _, err := ParseAnnotations(map[string]string{"cdi.k8s.io/x_1": bad})
		var ae *AnnotationError
		if !errors.As(err, &ae) || ae.Key != "cdi.k8s.io/x_1" {
			t.Errorf("value %q: got %v, want an *AnnotationError naming the key", bad, err)
		}
	}
	keys, devices, err := ParseAnnotations(nil)
	if err != nil || keys != nil || devices != nil {
		t.Errorf("nil map: %v %v %v", keys, devices, err)
	}
}
