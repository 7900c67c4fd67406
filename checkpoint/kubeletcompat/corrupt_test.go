package kubeletcompat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dranode/dranode/checkpoint"
)

// decoders runs each reader over the same damage.
var decoders = []struct {
	name   string
	golden []string
	decode func(path string, data []byte) error
}{
	{
		name:   "dra",
		golden: []string{goldenDRA("empty"), goldenDRA("one-claim"), goldenDRA("several-claims")},
		decode: func(path string, data []byte) error { _, err := decodeDRAManagerState(path, data); return err },
	},
	{
		name: "devicemanager",
		golden: []string{goldenDeviceManager("per-numa-empty"), goldenDeviceManager("per-numa-several"),
			goldenDeviceManager("pre-1.20-several")},
		decode: func(path string, data []byte) error { _, err := decodeDeviceManagerCheckpoint(path, data); return err },
	},
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func wantCorrupt(t *testing.T, err error, path string) *checkpoint.CorruptError {
	t.Helper()
	var corrupt *checkpoint.CorruptError
	if !errors.Is(err, checkpoint.ErrCorrupt) || !errors.As(err, &corrupt) {
		t.Fatalf("got %v, want a *checkpoint.CorruptError", err)
	}
	if corrupt.Path != path {
		t.Errorf("CorruptError.Path = %q, want %q", corrupt.Path, path)
	}
	if errors.Is(err, ErrUnknownFormat) {
		t.Errorf("%v matches ErrUnknownFormat as well", err)
	}
	return corrupt
}

// TestChangedByteFailsChecksum changes one character inside the checksummed
// data of every golden file that has data to change.
func TestChangedByteFailsChecksum(t *testing.T) {
	for _, d := range decoders {
		for _, golden := range d.golden {
			data := mustRead(t, golden)
			// Device IDs, pool names and CDI IDs all contain a '-'.
			i := bytes.LastIndex(data, []byte("-"))
			if i < 0 {
				continue // nothing but envelope; the checksum cases below cover it
			}
			t.Run(d.name+"/"+filepath.Base(golden), func(t *testing.T) {
				damaged := bytes.Clone(data)
				damaged[i] = '_'
				err := d.decode(golden, damaged)
				wantCorrupt(t, err, golden)
				var sum *ChecksumError
				if !errors.Is(err, ErrChecksumMismatch) || !errors.As(err, &sum) || sum.Stored == sum.Computed {
					t.Errorf("got %v, want a ChecksumError with different sums", err)
				}
			})
		}
	}
}

func TestChangedChecksumFails(t *testing.T) {
	for _, d := range decoders {
		for _, golden := range d.golden {
			t.Run(d.name+"/"+filepath.Base(golden), func(t *testing.T) {
				data := mustRead(t, golden)
				// The last digit of the checksum, which ends the file.
				i := bytes.LastIndexAny(data, "0123456789")
				damaged := bytes.Clone(data)
				damaged[i] = '0' + (damaged[i]-'0'+1)%10
				err := d.decode(golden, damaged)
				wantCorrupt(t, err, golden)
				if !errors.Is(err, ErrChecksumMismatch) {
					t.Errorf("got %v, want ErrChecksumMismatch", err)
				}
			})
		}
	}
}

// TestTruncatedFails cuts every golden file at many lengths, as a crash
// during a non-atomic copy or a full disk would.
func TestTruncatedFails(t *testing.T) {
	for _, d := range decoders {
		for _, golden := range d.golden {
			t.Run(d.name+"/"+filepath.Base(golden), func(t *testing.T) {
				data := mustRead(t, golden)
				for n := 0; n < len(data); n += 1 + len(data)/97 {
					err := d.decode(golden, data[:n])
					wantCorrupt(t, err, golden)
					if !errors.Is(err, io.ErrUnexpectedEOF) {
						t.Fatalf("cut at %d: %v, want io.ErrUnexpectedEOF", n, err)
					}
				}
			})
		}
	}
}

func TestBadJSONFails(t *testing.T) {
	for _, d := range decoders {
		for _, golden := range d.golden {
			t.Run(d.name+"/"+filepath.Base(golden), func(t *testing.T) {
				data := mustRead(t, golden)
				i := bytes.Index(data, []byte(":"))
				damaged := bytes.Clone(data)
				damaged[i] = ';'
				err := d.decode(golden, damaged)
				c := wantCorrupt(t, err, golden)
				if errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("got %v, which claims truncation", err)
				}
				if c.Offset != int64(i+1) {
					t.Errorf("Offset = %d, want %d (just after the bad byte)", c.Offset, i+1)
				}
			})
		}
	}
}

func TestWrongTypeFails(t *testing.T) {
	inputs := map[string][]string{
		"dra":           {`[]`, `{"Data":5,"Checksum":1}`, `{"Data":"x","Checksum":-1}`},
		"devicemanager": {`"x"`, `{"Data":[],"Checksum":1}`, `{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"zero":["a"]}}]},"Checksum":1}`},
	}
	for _, d := range decoders {
		for _, in := range inputs[d.name] {
			t.Run(d.name+"/"+in, func(t *testing.T) {
				wantCorrupt(t, d.decode("f", []byte(in)), "f")
			})
		}
	}
}

// draFile builds a DRA checkpoint around arbitrary data with a valid checksum.
func draFile(t testing.TB, data string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"Data": data, "Checksum": crc32.ChecksumIEEE([]byte(data))})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDRAUnknownFormat(t *testing.T) {
	tests := []struct {
		name string
		file []byte
	}{
		// The DRA manager's first layout (Kubernetes 1.27 through at least 1.30).
		{name: "entries-layout", file: []byte(`{"version":"v1","entries":[{"DriverName":"gpu.example.com","ClaimUID":"u"}],"checksum":12345}`)},
		{name: "other-apiVersion", file: draFile(t, `{"kind":"DRACheckpoint","apiVersion":"checkpoint.dra.kubelet.k8s.io/v2","ClaimInfoStateList":[]}`)},
		{name: "other-kind", file: draFile(t, `{"kind":"CPUManagerCheckpoint","apiVersion":"checkpoint.dra.kubelet.k8s.io/v1"}`)},
		{name: "no-kind", file: draFile(t, `{}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeDRAManagerState("p", tt.file)
			var unknown *UnknownFormatError
			if !errors.Is(err, ErrUnknownFormat) || !errors.As(err, &unknown) || unknown.Path != "p" || unknown.File != DRAManagerStateFile {
				t.Fatalf("got %v, want an *UnknownFormatError for p", err)
			}
			if errors.Is(err, checkpoint.ErrCorrupt) {
				t.Errorf("%v: an unknown layout is not damage", err)
			}
		})
	}
}

func TestDRABadDataJSONFails(t *testing.T) {
	_, err := DecodeDRAManagerState(draFile(t, `{"kind":"DRACheckpoint",`))
	if !errors.Is(err, checkpoint.ErrCorrupt) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated Data with a matching checksum: %v, want corrupt and truncated", err)
	}
	_, err = DecodeDRAManagerState(draFile(t, `{"kind":"DRACheckpoint","ClaimInfoStateList":{}}`))
	if !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("ClaimInfoStateList of the wrong type: %v, want corrupt", err)
	}
}

func TestDeviceManagerUnknownFormat(t *testing.T) {
	tests := map[string]string{
		"no-data":  `{"Checksum":1}`,
		"mixed":    `{"Data":{"PodDeviceEntries":[{"DeviceIDs":["a"]},{"DeviceIDs":{"0":["b"]}}]},"Checksum":1}`,
		"not-data": `{"data_v3":{},"Checksum":1}`,
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeDeviceManagerCheckpoint([]byte(in))
			if !errors.Is(err, ErrUnknownFormat) || errors.Is(err, checkpoint.ErrCorrupt) {
				t.Errorf("got %v, want ErrUnknownFormat only", err)
			}
		})
	}
}

// TestListLayoutChecksumIsNotPerNUMA makes sure each layout is verified with
// its own rendering: a pre-1.20 file relabelled as per-NUMA (list turned
// into a node-0 object, checksum kept) must fail.
func TestListLayoutChecksumIsNotPerNUMA(t *testing.T) {
	data := mustRead(t, goldenDeviceManager("pre-1.20-several"))
	var file map[string]any
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	for _, e := range file["Data"].(map[string]any)["PodDeviceEntries"].([]any) {
		entry := e.(map[string]any)
		entry["DeviceIDs"] = map[string]any{"0": entry["DeviceIDs"]}
	}
	relabelled, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeDeviceManagerCheckpoint(relabelled); !errors.Is(err, ErrChecksumMismatch) {
		t.Errorf("got %v, want ErrChecksumMismatch", err)
	}
}

func TestMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothing")
	if _, err := ReadDRAManagerState(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadDRAManagerState: %v, want fs.ErrNotExist", err)
	}
	if _, err := ReadDeviceManagerCheckpoint(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadDeviceManagerCheckpoint: %v, want fs.ErrNotExist", err)
	}
}

func TestErrorMessagesNameTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, DRAManagerStateFile)
	if err := os.WriteFile(path, []byte(`{"Data":"{}","Checksum":7}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ReadDRAManagerState(path)
	for _, want := range []string{path, "checksum", fmt.Sprint(crc32.ChecksumIEEE([]byte("{}")))} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}
