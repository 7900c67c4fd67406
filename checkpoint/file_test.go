package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The device-record history used by the migration tests (fixtures in
// testdata/, written by testdata/checkpoint_format.py):
//
//	v0 {"gpu":"gpu-3","node":1}                          before the first written format
//	v1 {"device":"gpu-0","numa":1}                       one device
//	v2 {"devices":[{"name":"gpu-0","numa":1}]}            a list
//	v3 {"devices":[{"name":"gpu-0","numaNodes":[1]}]}     several NUMA nodes per device
type devicesV3 struct {
	Devices []deviceV3 `json:"devices"`
}

type deviceV3 struct {
	Name      string `json:"name"`
	NUMANodes []int  `json:"numaNodes"`
}

func migrateDevices0to1(in json.RawMessage) (json.RawMessage, error) {
	var v0 struct {
		GPU  string `json:"gpu"`
		Node int    `json:"node"`
	}
	if err := json.Unmarshal(in, &v0); err != nil {
		return nil, err
	}
	if v0.GPU == "" {
		return nil, errors.New("version 0 record without a gpu")
	}
	return json.Marshal(map[string]any{"device": v0.GPU, "numa": v0.Node})
}

func migrateDevices1to2(in json.RawMessage) (json.RawMessage, error) {
	var v1 struct {
		Device string `json:"device"`
		NUMA   int    `json:"numa"`
	}
	if err := json.Unmarshal(in, &v1); err != nil {
		return nil, err
	}
	if v1.Device == "" {
		return nil, errors.New("version 1 record without a device")
	}
	return json.Marshal(map[string]any{"devices": []map[string]any{{"name": v1.Device, "numa": v1.NUMA}}})
}

func migrateDevices2to3(in json.RawMessage) (json.RawMessage, error) {
	var v2 struct {
		Devices []struct {
			Name string `json:"name"`
			NUMA int    `json:"numa"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(in, &v2); err != nil {
		return nil, err
	}
	var v3 devicesV3
	for _, d := range v2.Devices {
		v3.Devices = append(v3.Devices, deviceV3{Name: d.Name, NUMANodes: []int{d.NUMA}})
	}
	return json.Marshal(v3)
}

// downgradeDevices3to2 keeps the first NUMA node: what version 2 can say.
func downgradeDevices3to2(in json.RawMessage) (json.RawMessage, error) {
	var v3 devicesV3
	if err := json.Unmarshal(in, &v3); err != nil {
		return nil, err
	}
	type devV2 struct {
		Name string `json:"name"`
		NUMA int    `json:"numa"`
	}
	out := struct {
		Devices []devV2 `json:"devices"`
	}{Devices: []devV2{}}
	for _, d := range v3.Devices {
		numa := 0
		if len(d.NUMANodes) > 0 {
			numa = d.NUMANodes[0]
		}
		out.Devices = append(out.Devices, devV2{Name: d.Name, NUMA: numa})
	}
	return json.Marshal(out)
}

func devicesSchema(version int) Schema {
	s := Schema{Kind: "dranode.io/test-devices", Version: version, Migrations: map[int]func(json.RawMessage) (json.RawMessage, error){
		0: migrateDevices0to1,
	}}
	if version > 1 {
		s.Migrations[1] = migrateDevices1to2
	}
	if version > 2 {
		s.Migrations[2] = migrateDevices2to3
	}
	return s
}

// copyFixture copies testdata/name into a fresh directory as "state".
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func openT[T any](t *testing.T, path string, s Schema, opts ...Option) *File[T] {
	t.Helper()
	f, err := OpenFile[T](path, s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFileSaveLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	f := openT[devicesV3](t, path, devicesSchema(3))
	if _, err := f.Load(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of a missing file: %v, want fs.ErrNotExist", err)
	}
	want := devicesV3{Devices: []deviceV3{{Name: "gpu-0", NUMANodes: []int{0, 1}}}}
	if err := f.Save(want); err != nil {
		t.Fatal(err)
	}
	got, err := f.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded %+v, want %+v", got, want)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
	// The bytes on disk are exactly the documented layout.
	data, _ := os.ReadFile(path)
	payload, _ := json.Marshal(want)
	if wantBytes := encodeFile(devicesSchema(3), 3, payload, ""); !bytes.Equal(data, wantBytes) {
		t.Fatalf("stored bytes\n%q\nwant\n%q", data, wantBytes)
	}
	if n := f.Fsyncs(); n != 2 {
		t.Fatalf("Save made %d fsyncs, want 2 (file and directory)", n)
	}
}

func TestFileLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	f := openT[int](t, path, devicesSchema(1))
	if _, err := OpenFile[int](path, devicesSchema(1)); !errors.Is(err, ErrLocked) {
		t.Fatalf("second OpenFile: %v, want ErrLocked", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Save(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Save after Close: %v, want ErrClosed", err)
	}
	g, err := OpenFile[int](path, devicesSchema(1))
	if err != nil {
		t.Fatalf("OpenFile after Close: %v", err)
	}
	g.Close()
}

func TestFileRemovesTempDebris(t *testing.T) {
	dir := t.TempDir()
	debris := filepath.Join(dir, ".state.tmp-12345")
	other := filepath.Join(dir, ".other.tmp-12345")
	for _, p := range []string{debris, other} {
		if err := os.WriteFile(p, []byte("half a save"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	openT[int](t, filepath.Join(dir, "state"), devicesSchema(1))
	if _, err := os.Stat(debris); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("temporary file of a crashed save still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("temporary file of another store was removed: %v", err)
	}
}

func TestSchemaValidation(t *testing.T) {
	noop := func(b json.RawMessage) (json.RawMessage, error) { return b, nil }
	for _, tc := range []struct {
		name   string
		schema Schema
	}{
		{"empty kind", Schema{Version: 1}},
		{"version 0", Schema{Kind: "k", Version: 0}},
		{"migration from current", Schema{Kind: "k", Version: 2, Migrations: map[int]func(json.RawMessage) (json.RawMessage, error){2: noop}}},
		{"migration from -1", Schema{Kind: "k", Version: 2, Migrations: map[int]func(json.RawMessage) (json.RawMessage, error){-1: noop, 0: noop, 1: noop}}},
		{"nil migration from 0", Schema{Kind: "k", Version: 1, Migrations: map[int]func(json.RawMessage) (json.RawMessage, error){0: nil}}},
		{"nil migration", Schema{Kind: "k", Version: 2, Migrations: map[int]func(json.RawMessage) (json.RawMessage, error){1: nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := OpenFile[int](filepath.Join(t.TempDir(), "f"), tc.schema); !errors.Is(err, ErrInvalidSchema) {
				t.Fatalf("OpenFile: %v, want ErrInvalidSchema", err)
			}
			if _, err := OpenJournal[int](t.TempDir(), tc.schema); !errors.Is(err, ErrInvalidSchema) {
				t.Fatalf("OpenJournal: %v, want ErrInvalidSchema", err)
			}
		})
	}
	// Upgrading from version 0 is allowed; writing it is not (above).
	valid := Schema{Kind: "k", Version: 1, Migrations: map[int]func(json.RawMessage) (json.RawMessage, error){0: noop}}
	if f, err := OpenFile[int](filepath.Join(t.TempDir(), "f"), valid); err != nil {
		t.Fatalf("OpenFile with a migration from version 0: %v", err)
	} else {
		f.Close()
	}
	if j, err := OpenJournal[int](t.TempDir(), valid); err != nil {
		t.Fatalf("OpenJournal with a migration from version 0: %v", err)
	} else {
		j.Close()
	}
}

func TestMigrationSteps(t *testing.T) {
	for _, tc := range []struct {
		name string
		step func(json.RawMessage) (json.RawMessage, error)
		in   string
		want string
	}{
		{"0 to 1", migrateDevices0to1, `{"gpu":"gpu-3","node":1}`, `{"device":"gpu-3","numa":1}`},
		{"1 to 2", migrateDevices1to2, `{"device":"gpu-0","numa":1}`, `{"devices":[{"name":"gpu-0","numa":1}]}`},
		{"2 to 3", migrateDevices2to3, `{"devices":[{"name":"a","numa":1},{"name":"b","numa":0}]}`, `{"devices":[{"name":"a","numaNodes":[1]},{"name":"b","numaNodes":[0]}]}`},
		{"2 to 3, no devices", migrateDevices2to3, `{"devices":[]}`, `{"devices":null}`},
		{"3 to 2 (downgrade)", downgradeDevices3to2, `{"devices":[{"name":"a","numaNodes":[1,0]}]}`, `{"devices":[{"name":"a","numa":1}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.step(json.RawMessage(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestLoadUpgradesOlderVersions(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		version int // the code's current version
		want    any
	}{
		{"file-v1.ckpt", 3, devicesV3{Devices: []deviceV3{{Name: "gpu-0", NUMANodes: []int{1}}}}},
		{"file-v2.ckpt", 3, devicesV3{Devices: []deviceV3{{Name: "gpu-0", NUMANodes: []int{1}}, {Name: "gpu-1", NUMANodes: []int{0}}}}},
		{"file-v1.ckpt", 2, map[string]any{"devices": []any{map[string]any{"name": "gpu-0", "numa": float64(1)}}}},
		{"file-v0.ckpt", 3, devicesV3{Devices: []deviceV3{{Name: "gpu-3", NUMANodes: []int{1}}}}},
		{"file-v0.ckpt", 2, map[string]any{"devices": []any{map[string]any{"name": "gpu-3", "numa": float64(1)}}}},
		{"file-v0.ckpt", 1, map[string]any{"device": "gpu-3", "numa": float64(1)}},
	} {
		t.Run(fmt.Sprintf("%s as v%d", tc.fixture, tc.version), func(t *testing.T) {
			path := copyFixture(t, tc.fixture)
			before, _ := os.ReadFile(path)
			var got any
			var err error
			if tc.version == 3 {
				got, err = openT[devicesV3](t, path, devicesSchema(3)).Load()
			} else {
				got, err = openT[map[string]any](t, path, devicesSchema(tc.version)).Load()
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("loaded %#v, want %#v", got, tc.want)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Fatal("Load changed the file")
			}
		})
	}
}

func TestSaveWritesCurrentVersion(t *testing.T) {
	path := copyFixture(t, "file-v1.ckpt")
	f := openT[devicesV3](t, path, devicesSchema(3))
	v, err := f.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Save(v); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	version, payload, err := decodeFile(path, data, devicesSchema(3))
	if err != nil || version != 3 || string(payload) != `{"devices":[{"name":"gpu-0","numaNodes":[1]}]}` {
		t.Fatalf("after Save: version %d payload %s err %v", version, payload, err)
	}
}

func TestMigrationFailures(t *testing.T) {
	t.Run("missing step", func(t *testing.T) {
		s := devicesSchema(3)
		delete(s.Migrations, 1)
		_, err := openT[devicesV3](t, copyFixture(t, "file-v1.ckpt"), s).Load()
		var me *MigrationError
		if !errors.As(err, &me) || me.From != 1 || !errors.Is(err, ErrMigration) {
			t.Fatalf("got %v, want *MigrationError from version 1", err)
		}
	})
	// A schema that never had a version 0 cannot read one, but the file
	// is older data, not damage: no policy may move it aside.
	t.Run("missing step from version 0", func(t *testing.T) {
		s := devicesSchema(3)
		delete(s.Migrations, 0)
		path := copyFixture(t, "file-v0.ckpt")
		before, _ := os.ReadFile(path)
		_, err := openT[devicesV3](t, path, s, WithCorruptPolicy(MoveCorruptAside)).Load()
		var me *MigrationError
		if !errors.As(err, &me) || me.From != 0 || me.Path != path || errors.Is(err, ErrCorrupt) {
			t.Fatalf("got %v, want *MigrationError from version 0", err)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Fatal("version 0 file changed by a schema that cannot upgrade it")
		}
	})
	t.Run("step fails", func(t *testing.T) {
		s := devicesSchema(3)
		boom := errors.New("boom")
		s.Migrations[2] = func(json.RawMessage) (json.RawMessage, error) { return nil, boom }
		path := copyFixture(t, "file-v1.ckpt")
		_, err := openT[devicesV3](t, path, s, WithCorruptPolicy(MoveCorruptAside)).Load()
		var me *MigrationError
		if !errors.As(err, &me) || me.From != 2 || !errors.Is(err, boom) || me.Path != path {
			t.Fatalf("got %v, want *MigrationError from version 2 wrapping boom", err)
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("a failing migration is a code bug, not corruption; the file must stay: %v", err)
		}
	})
}

func TestNewerVersionRefused(t *testing.T) {
	for _, policy := range []CorruptPolicy{FailOnCorrupt, MoveCorruptAside} {
		t.Run(policy.String(), func(t *testing.T) {
			path := copyFixture(t, "file-v9.ckpt")
			before, _ := os.ReadFile(path)
			f := openT[devicesV3](t, path, devicesSchema(3), WithCorruptPolicy(policy))

			// Save before any Load must refuse as well.
			err := f.Save(devicesV3{})
			var nv *NewerVersionError
			if !errors.As(err, &nv) || nv.Version != 9 || nv.Supported != 3 || nv.Path != path || nv.Kind != "dranode.io/test-devices" {
				t.Fatalf("Save: %v, want *NewerVersionError{9, 3}", err)
			}
			if _, err := f.Load(); !errors.Is(err, ErrNewerVersion) {
				t.Fatalf("Load: %v, want ErrNewerVersion", err)
			}
			if err := f.Save(devicesV3{}); !errors.Is(err, ErrNewerVersion) {
				t.Fatalf("Save after Load: %v, want ErrNewerVersion", err)
			}
			after, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(before, after) {
				t.Fatalf("the newer file changed or vanished: %v", err)
			}
			entries, _ := os.ReadDir(filepath.Dir(path))
			for _, e := range entries {
				if strings.Contains(e.Name(), "corrupt") {
					t.Fatalf("newer file was treated as corrupt: %s", e.Name())
				}
			}
		})
	}
}

// corruptions derives broken files from a valid one.
func corruptions() []struct {
	name   string
	data   []byte
	reason string // substring of CorruptError.Reason
} {
	s := devicesSchema(3)
	good := encodeFile(s, 3, []byte(`{"devices":[]}`), "")
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		return b
	}
	payloadFrame := len(good) - len(`{"devices":[]}`) - frameHdrLen
	badJSON := appendFrame(appendHeader(nil, magicFile, header{Kind: s.Kind, Version: 3}), []byte(`{"devices":[`))
	wrongKind := appendFrame(appendHeader(nil, magicFile, header{Kind: "dranode.io/other", Version: 3}), []byte(`{}`))
	headerNotJSON := appendFrame(appendFrame([]byte(magicFile), []byte("kind=x")), []byte(`{}`))
	wrongType := appendFrame(appendHeader(nil, magicFile, header{Kind: s.Kind, Version: 3}), []byte(`{"devices":"gpu-0"}`))
	// Version 0 is a format a schema may upgrade from, so a header whose
	// version is missing must not read as 0.
	withHeader := func(h string) []byte {
		return appendFrame(appendFrame([]byte(magicFile), []byte(h)), []byte(`{"devices":[]}`))
	}
	return []struct {
		name   string
		data   []byte
		reason string
	}{
		{"empty", nil, "shorter than"},
		{"bad magic", flip(0), "magic"},
		{"truncated in the payload", good[:len(good)-3], "payload: frame extends past end of file"},
		{"truncated in the payload header", good[:payloadFrame+5], "payload: truncated frame header"},
		{"truncated after the header", good[:payloadFrame], "payload: truncated frame header"},
		{"flipped checksum byte", flip(payloadFrame + 5), "payload: frame checksum mismatch"},
		{"flipped payload byte", flip(len(good) - 2), "payload: frame checksum mismatch"},
		{"flipped header byte", flip(magicLen + frameHdrLen + 3), "header: frame checksum mismatch"},
		{"bad JSON with a valid checksum", badJSON, "payload is not valid JSON"},
		{"header not JSON", headerNotJSON, "header is not valid JSON"},
		{"wrong kind", wrongKind, `kind "dranode.io/other", want "dranode.io/test-devices"`},
		{"trailing bytes", append(bytes.Clone(good), 0), "unexpected bytes after the payload"},
		{"payload of another shape", wrongType, "does not decode"},
		{"header without version", withHeader(`{"kind":"dranode.io/test-devices"}`), "header has no format version"},
		{"header version null", withHeader(`{"kind":"dranode.io/test-devices","version":null}`), "header has no format version"},
		{"header version a string", withHeader(`{"kind":"dranode.io/test-devices","version":"0"}`), `header format version "0" is not an integer`},
		{"header version a fraction", withHeader(`{"kind":"dranode.io/test-devices","version":0.5}`), "header format version 0.5 is not an integer"},
		{"header version an object", withHeader(`{"kind":"dranode.io/test-devices","version":{}}`), "header format version {} is not an integer"},
		{"negative header version", withHeader(`{"kind":"dranode.io/test-devices","version":-1}`), "format version -1 is negative"},
	}
}

func TestCorruptFileFails(t *testing.T) {
	for _, tc := range corruptions() {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			f := openT[devicesV3](t, path, devicesSchema(3))
			_, err := f.Load()
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Load: %v, want *CorruptError", err)
			}
			if ce.Path != path || !strings.Contains(ce.Reason, tc.reason) {
				t.Fatalf("CorruptError{Path: %q, Reason: %q}, want path %q and reason containing %q", ce.Path, ce.Reason, path, tc.reason)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("message %q does not name the file", err)
			}
			if err := f.Save(devicesV3{}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Save over a corrupt file under FailOnCorrupt: %v, want ErrCorrupt", err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, tc.data) {
				t.Fatal("corrupt file changed under FailOnCorrupt")
			}
		})
	}
}

func TestCorruptFileMovedAside(t *testing.T) {
	for _, tc := range corruptions() {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state")
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			f := openT[devicesV3](t, path, devicesSchema(3), WithCorruptPolicy(MoveCorruptAside))
			_, err := f.Load()
			var moved *MovedAsideError
			if !errors.As(err, &moved) || !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrCorrupt) {
				t.Fatalf("Load: %v, want *MovedAsideError matching fs.ErrNotExist only", err)
			}
			if !strings.HasPrefix(filepath.Base(moved.Aside), "state.corrupt-") || filepath.Dir(moved.Aside) != dir {
				t.Fatalf("moved to %s, want %s/state.corrupt-<timestamp>", moved.Aside, dir)
			}
			if !strings.Contains(moved.Cause.Reason, tc.reason) {
				t.Fatalf("cause %q, want %q", moved.Cause.Reason, tc.reason)
			}
			if evidence, err := os.ReadFile(moved.Aside); err != nil || !bytes.Equal(evidence, tc.data) {
				t.Fatalf("moved-aside file does not hold the corrupt bytes: %v", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("store not empty after moving aside: %v", err)
			}
			want := devicesV3{Devices: []deviceV3{{Name: "fresh"}}}
			if err := f.Save(want); err != nil {
				t.Fatal(err)
			}
			if got, err := f.Load(); err != nil || got.Devices[0].Name != "fresh" {
				t.Fatalf("after fresh start: %+v, %v", got, err)
			}
		})
	}
}

func TestSaveMovesCorruptAsideWithoutLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := openT[int](t, path, devicesSchema(1), WithCorruptPolicy(MoveCorruptAside))
	if err := f.Save(7); err != nil {
		t.Fatal(err)
	}
	matches, _ := filepath.Glob(path + ".corrupt-*")
	if len(matches) != 1 {
		t.Fatalf("corrupt file not kept aside: %v", matches)
	}
	if v, err := f.Load(); err != nil || v != 7 {
		t.Fatalf("Load: %v, %v", v, err)
	}
}

func TestDowngradeCopy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	v3 := devicesV3{Devices: []deviceV3{{Name: "gpu-0", NUMANodes: []int{1, 0}}}}

	newer := openT[devicesV3](t, path, devicesSchema(3), WithDowngradeCopy(downgradeDevices3to2))
	if err := newer.Save(v3); err != nil {
		t.Fatal(err)
	}
	newer.Close()

	// The previous release (version 2) reads the copy.
	type devicesV2 struct {
		Devices []struct {
			Name string `json:"name"`
			NUMA int    `json:"numa"`
		} `json:"devices"`
	}
	older := openT[devicesV2](t, path, devicesSchema(2))
	got, err := older.Load()
	if err != nil {
		t.Fatalf("previous release cannot load: %v", err)
	}
	if len(got.Devices) != 1 || got.Devices[0].Name != "gpu-0" || got.Devices[0].NUMA != 1 {
		t.Fatalf("previous release loaded %+v", got)
	}
	older.Close()

	// A copy that belongs to another main file is ignored: rewrite the
	// main file without refreshing the copy.
	stale := openT[devicesV3](t, path, devicesSchema(3))
	if err := stale.Save(devicesV3{}); err != nil {
		t.Fatal(err)
	}
	stale.Close()
	if _, err := openT[devicesV2](t, path, devicesSchema(2)).Load(); !errors.Is(err, ErrNewerVersion) {
		t.Fatalf("stale down-level copy was used: %v", err)
	}
}

// A down-level copy that the old release cannot decode must not get the
// newer main file moved aside as "corrupt".
func TestDowngradeCopyUndecodableKeepsNewerFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	newer := openT[devicesV3](t, path, devicesSchema(3), WithDowngradeCopy(func(json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"devices":"not a list"}`), nil
	}))
	if err := newer.Save(devicesV3{}); err != nil {
		t.Fatal(err)
	}
	newer.Close()
	before, _ := os.ReadFile(path)
	older := openT[devicesV3](t, path, devicesSchema(2), WithCorruptPolicy(MoveCorruptAside))
	_, err := older.Load()
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "down-level copy") {
		t.Fatalf("Load: %v, want a corrupt error about the down-level copy", err)
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(before, after) {
		t.Fatalf("the newer main file was touched: %v", err)
	}
}

func TestParseAsideName(t *testing.T) {
	at := time.Date(2026, 11, 23, 18, 4, 3, 123456789, time.UTC)
	for _, from := range []string{"log.1", "/var/lib/dranode/claims/snapshot", "state.ckpt"} {
		gotFrom, gotAt, ok := ParseAsideName(asideName(from, at.In(time.FixedZone("x", 3600))))
		if !ok || gotFrom != from || !gotAt.Equal(at) {
			t.Errorf("%s: %q %v %v, want %q %v", from, gotFrom, gotAt, ok, from, at)
		}
	}
	for _, name := range []string{"log.1", ".corrupt-20261123T180403.123456789Z", "log.1.corrupt-yesterday", "log.1.corrupt-20261123T180403Z", "lock"} {
		if from, _, ok := ParseAsideName(name); ok {
			t.Errorf("%q parsed as an aside copy of %q", name, from)
		}
	}
}
