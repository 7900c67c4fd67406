package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/dranode/dranode/checkpoint"
	"github.com/dranode/dranode/checkpoint/kubeletcompat"
)

// FuzzRecognise: whatever the bytes, checkpoint inspect ends in a report or
// one of the documented error kinds (corrupt, newer version, unknown format),
// never a panic; a file it accepts has a named format.
func FuzzRecognise(f *testing.F) {
	for _, seed := range []string{
		"../../../checkpoint/kubeletcompat/testdata/dra_manager_state/one-claim",
		"../../../checkpoint/kubeletcompat/testdata/kubelet_internal_checkpoint/pre-1.20-several",
		"../../../checkpoint/kubeletcompat/testdata/kubelet_internal_checkpoint/per-numa-several",
		"../../../claimcache/testdata/format0-journal/log.1",
		"../../../checkpoint/testdata/file-v1.ckpt",
	} {
		b, err := os.ReadFile(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"Data":"{}","Checksum":0}`))
	f.Add([]byte(`{"Data":{"PodDeviceEntries":[{}]},"Checksum":0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rep := &checkpointReport{Path: "fuzz"}
		_, err := recognise(context.Background(), rep, filepath.Join("dir", "fuzz"), bytes.NewReader(data), int64(len(data)))
		if err == nil {
			if rep.Format == "" {
				t.Fatalf("accepted without a format: %+v", rep)
			}
			return
		}
		if !errors.Is(err, checkpoint.ErrCorrupt) && !errors.Is(err, checkpoint.ErrNewerVersion) && !errors.Is(err, kubeletcompat.ErrUnknownFormat) {
			t.Fatalf("undocumented error kind %T: %v", err, err)
		}
	})
}
