package claimcache

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFreshRecordCarriesFormatVersion reads the headers of the files a new
// record is written in, byte by byte as the checkpoint README describes
// them: every one carries exactly FormatVersion, which is what dranodectl
// compares against.
func TestFreshRecordCarriesFormatVersion(t *testing.T) {
	dir := t.TempDir()
	c, _ := openT(t, dir, bootOne)
	if _, err := c.StartPrepare(ClaimRef{Namespace: "ns", Name: "claim", UID: "uid-1"}, "pod-1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	headers := 0
	for _, e := range entries {
		if e.Name() != "snapshot" && !strings.HasPrefix(e.Name(), "log.") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		// 8-byte magic, then the header frame: length, CRC-32C, JSON.
		if len(data) < 16 {
			t.Fatalf("%s: %d bytes, too short for a header", e.Name(), len(data))
		}
		n := binary.LittleEndian.Uint32(data[8:])
		if uint64(len(data)) < 16+uint64(n) {
			t.Fatalf("%s: header frame of %d bytes runs past the end", e.Name(), n)
		}
		var h struct {
			Kind    string `json:"kind"`
			Version *int   `json:"version"`
		}
		if err := json.Unmarshal(data[16:16+n], &h); err != nil {
			t.Fatalf("%s: header: %v", e.Name(), err)
		}
		if h.Kind != Kind || h.Version == nil || *h.Version != FormatVersion {
			t.Errorf("%s: header %s, want kind %q and version %d", e.Name(), data[16:16+n], Kind, FormatVersion)
		}
		headers++
	}
	if headers == 0 {
		t.Fatalf("no journal files in %s (found %d entries)", dir, len(entries))
	}
}
