package cdi

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// goldenMinimum is the minimum version of each golden spec in
// testdata/specs: each file uses the features of its own version, except
// 0.8.0 and 1.0.0, which added none.
var goldenMinimum = map[string]string{
	"v0.3.0.json": "0.3.0",
	"v0.4.0.json": "0.4.0",
	"v0.5.0.json": "0.5.0",
	"v0.6.0.json": "0.6.0",
	"v0.7.0.json": "0.7.0",
	"v0.8.0.json": "0.7.0",
	"v1.0.0.json": "0.6.0",
	"v1.1.0.json": "1.1.0",
}

func TestGoldenSpecsRoundTrip(t *testing.T) {
	files, err := filepath.Glob("testdata/specs/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(goldenMinimum) {
		t.Fatalf("found %d golden specs, want %d: %v", len(files), len(goldenMinimum), files)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			in, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := DecodeSpec(in)
			if err != nil {
				t.Fatal(err)
			}
			if err := spec.Validate(); err != nil {
				t.Errorf("golden spec invalid: %v", err)
			}
			if got, want := MinimumVersion(spec), goldenMinimum[filepath.Base(file)]; got != want {
				t.Errorf("MinimumVersion = %s, want %s", got, want)
			}
			out, err := spec.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, in, out) {
				t.Errorf("round trip changed the spec:\n in: %s\nout: %s", in, out)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}

func TestDecodeSpecStrict(t *testing.T) {
	const good = `{"cdiVersion":"0.3.0","kind":"a/b","devices":[{"name":"d","containerEdits":{"env":["A=1"]}}]}`
	if _, err := DecodeSpec([]byte(good)); err != nil {
		t.Fatalf("good spec rejected: %v", err)
	}
	tests := []struct {
		name, input string
		want        error
		path        string
	}{
		{"unknown top-level field", `{"cdiVersion":"0.3.0","kind":"a/b","devices":[],"extra":1}`, ErrUnknownField, "extra"},
		{"miscased field", `{"CDIVersion":"0.3.0","kind":"a/b","devices":[]}`, ErrUnknownField, "CDIVersion"},
		{"unknown device-node field", `{"kind":"a/b","devices":[{"name":"d","containerEdits":{"deviceNodes":[{"path":"/x","mode":1}]}}]}`,
			ErrUnknownField, "devices[0].containerEdits.deviceNodes[0].mode"},
		{"unknown hook field", `{"kind":"a/b","containerEdits":{"hooks":[{"hookName":"prestart","path":"/x","timeOut":1}]}}`,
			ErrUnknownField, "containerEdits.hooks[0].timeOut"},
		{"duplicate field", `{"kind":"a/b","kind":"c/d"}`, ErrDuplicateField, "kind"},
		{"invalid UTF-8", "{\"kind\":\"a/b\",\"devices\":[{\"name\":\"x\",\"containerEdits\":{\"env\":[\"A=\xff\"]}}]}", ErrNotUTF8, ""},
		{"duplicate annotation", `{"kind":"a/b","annotations":{"x":"1","x":"2"}}`, ErrDuplicateField, "annotations.x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := DecodeSpec([]byte(tt.input))
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, %v; want %v", spec, err, tt.want)
			}
			var de *DecodeError
			if !errors.As(err, &de) || de.Path != tt.path {
				t.Fatalf("error %v: want a *DecodeError at %q", err, tt.path)
			}
			if !strings.Contains(err.Error(), tt.path+": ") {
				t.Errorf("message %q does not give the path %q", err, tt.path)
			}
		})
	}
	for _, bad := range []string{``, `null`, ` [1]`, `"x"`, `{`, `[]`, `{"kind":1}`, `{"devices":[{"containerEdits":{"deviceNodes":[{"major":"1"}]}}]}`, `{"kind":"a/b"} x`} {
		if _, err := DecodeSpec([]byte(bad)); err == nil {
			t.Errorf("DecodeSpec(%q) accepted malformed input", bad)
		}
	}
}

// Nesting deeper than the schema is refused without recursing into it.
func TestDecodeSpecDeepNesting(t *testing.T) {
	for _, field := range []string{"kind", "annotations", "devices", "containerEdits"} {
		deep := `{"` + field + `":` + strings.Repeat("[", 1<<20) + strings.Repeat("]", 1<<20) + `}`
		if _, err := DecodeSpec([]byte(deep)); err == nil {
			t.Errorf("%s: deeply nested arrays accepted", field)
		}
	}
}

// A null spec inside another document leaves the field alone, as
// encoding/json does for every type.
func TestUnmarshalNullSpec(t *testing.T) {
	var doc struct{ Spec *Spec }
	if err := json.Unmarshal([]byte(`{"Spec":null}`), &doc); err != nil || doc.Spec != nil {
		t.Fatalf("got %+v, %v", doc.Spec, err)
	}
	var inline struct{ Spec Spec }
	inline.Spec.Kind = "a/b"
	if err := json.Unmarshal([]byte(`{"Spec":null}`), &inline); err != nil || inline.Spec.Kind != "a/b" {
		t.Fatalf("got %+v, %v", inline.Spec, err)
	}
}

// Fields the schema lets be free-form (annotations) keep any key, and
// spec-level edits that are empty are left out, not written as {}.
func TestEncodeNormalizes(t *testing.T) {
	spec, err := DecodeSpec([]byte(`{"cdiVersion":"0.6.0","kind":"a/b","annotations":{"Any Key!":"v"},"devices":[{"name":"d","containerEdits":{"env":["A=1"]}}],"containerEdits":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := spec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), `"containerEdits": {}`) || !strings.Contains(string(out), `"Any Key!": "v"`) {
		t.Errorf("unexpected encoding:\n%s", out)
	}
}

func TestQualifiedNames(t *testing.T) {
	s := &Spec{Kind: "v.com/c", Devices: []Device{{Name: "a"}, {Name: "0:1"}}}
	names, err := s.QualifiedNames()
	if err != nil || len(names) != 2 || names[0] != "v.com/c=a" || names[1] != "v.com/c=0:1" {
		t.Fatalf("QualifiedNames = %q, %v", names, err)
	}
	for _, bad := range []*Spec{{Kind: "v.com", Devices: []Device{{Name: "a"}}}, {Kind: "v.com/c", Devices: []Device{{Name: "a b"}}}} {
		if _, err := bad.QualifiedNames(); !errors.Is(err, ErrInvalidName) {
			t.Errorf("%+v: got %v, want a name error", bad, err)
		}
	}
}
