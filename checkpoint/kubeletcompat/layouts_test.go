package kubeletcompat

import (
	"testing"

	current "github.com/dranode/dranode/checkpoint/kubeletcompat/internal/devicemanager/checkpoint"
	pre120 "github.com/dranode/dranode/checkpoint/kubeletcompat/internal/devicemanagerv1/checkpoint"
)

// The two device manager layouts render their data with different Go types
// and options, so their checksums differ as soon as there is an entry; with
// none, the renderings coincide and so do the files (see the "-empty" golden
// files), which is why the reader cannot and need not tell them apart.
func TestLayoutChecksums(t *testing.T) {
	registered := map[string][]string{"example.com/gpu": {"gpu-0"}}
	if a, b := current.Checksum(nil, registered), pre120.Checksum(nil, registered); a != b {
		t.Errorf("without entries: current %d, pre-1.20 %d; want equal", a, b)
	}
	a := current.Checksum([]current.PodDevicesEntry{{PodUID: "p", DeviceIDs: current.DevicesPerNUMA{0: {"gpu-0"}}}}, registered)
	b := pre120.Checksum([]pre120.PodDevicesEntry{{PodUID: "p", DeviceIDs: []string{"gpu-0"}}}, registered)
	if a == b {
		t.Errorf("with an entry both layouts give %d; the layouts' type names should make them differ", a)
	}
	// Map order must not matter: the rendering sorts keys.
	big := map[string][]string{}
	for _, k := range []string{"e", "b", "d", "a", "c", "f", "h", "g"} {
		big["example.com/"+k] = []string{k + "-0", k + "-1"}
	}
	first := current.Checksum(nil, big)
	for range 20 {
		if again := current.Checksum(nil, big); again != first {
			t.Fatalf("checksum changed between calls: %d then %d", first, again)
		}
	}
}
