package cdiref

import (
	"slices"
	"strings"
	"testing"

	"github.com/dranode/dranode/cdi"
	refcdi "tags.cncf.io/container-device-interface/pkg/cdi"
)

// AnnotationKey builds the same keys as the reference and refuses the same
// inputs; only the errors differ (ours are typed).
func TestAnnotationKeyDifferential(t *testing.T) {
	parts := []string{"", "a", "gpu.example.com", "0f3c2a9e-7b1d-4c3e-9f8a-2b6d5e4c1a00", "pool/dev", "-a", "a-", "a_b",
		"a.b", "a b", "é", "a:b", "/", "a/", strings.Repeat("d", 26), strings.Repeat("d", 27), strings.Repeat("x", 62)}
	for _, driver := range parts {
		for _, id := range parts {
			ref, refErr := refcdi.AnnotationKey(driver, id)
			ours, err := cdi.AnnotationKey(driver, id)
			if (refErr == nil) != (err == nil) || ref != ours {
				t.Errorf("AnnotationKey(%q, %q): reference %q, %v; ours %q, %v", driver, id, ref, refErr, ours, err)
			}
		}
	}
}

// ParseAnnotations finds the same devices as the reference, in sorted
// order without duplicates, and rejects the same values.
func TestParseAnnotationsDifferential(t *testing.T) {
	values := []string{"v.com/c=a", "v.com/c=b,v.com/c=a", "v.com/c=a,v.com/c=a", "", "v.com/c=a,", "bad", "v.com/c=a, v.com/c=b"}
	for _, v1 := range values {
		for _, v2 := range values {
			ann := map[string]string{"cdi.k8s.io/x_1": v1, "cdi.k8s.io/y_2": v2, "other/z": "bad"}
			refKeys, refDevices, refErr := refcdi.ParseAnnotations(ann)
			keys, devices, err := cdi.ParseAnnotations(ann)
			if (refErr == nil) != (err == nil) {
				t.Fatalf("%q: reference error %v, ours %v", ann, refErr, err)
			}
			if err != nil {
				continue
			}
			slices.Sort(refKeys)
			slices.Sort(refDevices)
			if !slices.Equal(keys, refKeys) || !slices.Equal(devices, slices.Compact(refDevices)) {
				t.Errorf("%q: reference %q %q, ours %q %q", ann, refKeys, refDevices, keys, devices)
			}
		}
	}
}
