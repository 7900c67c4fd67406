package kubeletcompat

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/dranode/dranode/checkpoint"
)

// addGoldenSeeds seeds a fuzz target with every golden file of one kind; the
// corpus under testdata/fuzz adds damaged and hand-made inputs.
func addGoldenSeeds(f *testing.F, kind string) {
	paths, err := filepath.Glob(filepath.Join("testdata", kind, "*"))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no golden files for %s: %v", kind, err)
	}
	for _, p := range paths {
		f.Add(mustRead(f, p))
	}
}

// classified fails unless err is one of the documented kinds: damage or an
// unknown layout, never both, never something else.
func classified(t *testing.T, err error) {
	corrupt, unknown := errors.Is(err, checkpoint.ErrCorrupt), errors.Is(err, ErrUnknownFormat)
	if corrupt == unknown {
		t.Fatalf("error is neither or both of ErrCorrupt and ErrUnknownFormat: %v", err)
	}
}

func FuzzDecodeDRAManagerState(f *testing.F) {
	addGoldenSeeds(f, DRAManagerStateFile)
	f.Fuzz(func(t *testing.T, data []byte) {
		state, err := DecodeDRAManagerState(data)
		if err != nil {
			classified(t, err)
			return
		}
		again, err := DecodeDRAManagerState(data)
		if err != nil || !reflect.DeepEqual(state, again) {
			t.Fatalf("second decode differs: %+v, %v", again, err)
		}
	})
}

func FuzzDecodeDeviceManagerCheckpoint(f *testing.F) {
	addGoldenSeeds(f, DeviceManagerCheckpointFile)
	f.Fuzz(func(t *testing.T, data []byte) {
		cp, err := DecodeDeviceManagerCheckpoint(data)
		if err != nil {
			classified(t, err)
			return
		}
		if cp.Format != FormatDevicesPerNUMA && cp.Format != FormatDeviceList {
			t.Fatalf("decoded without a layout: %+v", cp)
		}
		again, err := DecodeDeviceManagerCheckpoint(data)
		if err != nil || !reflect.DeepEqual(cp, again) {
			t.Fatalf("second decode differs: %+v, %v", again, err)
		}
	})
}
