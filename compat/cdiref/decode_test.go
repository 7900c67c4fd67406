package cdiref

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/dranode/dranode/cdi"
	refcdi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// compareDecode reports how DecodeSpec and the reference's ParseSpec (a
// YAML decoder with known fields only) disagree on a JSON document.
func compareDecode(data []byte) string {
	ref, refErr := refcdi.ParseSpec(data)
	ours, err := cdi.DecodeSpec(data)
	if refErr == nil && ref == nil {
		refErr = errNoSpec // ReadSpec refuses a document that decodes to nothing
	}
	if (refErr == nil) != (err == nil) {
		if refErr == nil && isTypeMismatch(err) {
			return "" // a known difference, see isTypeMismatch
		}
		return "reference error " + errString(refErr) + ", ours " + errString(err)
	}
	if err != nil {
		return ""
	}
	out, err := json.Marshal(ours)
	if err != nil {
		return "re-encoding: " + err.Error()
	}
	var back = new(specsSpec)
	if err := json.Unmarshal(out, back); err != nil {
		return "reference cannot read our encoding: " + err.Error()
	}
	if !reflect.DeepEqual(normalize(ref), normalize(back)) {
		return "values differ"
	}
	return ""
}

func FuzzDecodeDifferential(f *testing.F) {
	files, _ := os.ReadDir("../../cdi/testdata/specs")
	for _, e := range files {
		data, err := os.ReadFile("../../cdi/testdata/specs/" + e.Name())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"kind":"a/b","Kind":"c/d"}`))
	f.Add([]byte(`{"kind":"a/b","devices":[{"name":"x","containerEdits":{"deviceNodes":[{"path":"/x","major":1.0}]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		if diff := compareDecode(data); diff != "" {
			t.Fatalf("%s\n%s", diff, data)
		}
	})
}

type specsSpec = specs.Spec

var errNoSpec = errors.New("no spec data")

// normalize makes the values comparable: empty and nil lists and maps mean
// the same in the JSON form (omitempty), so compare through JSON.
func normalize(s *specs.Spec) any {
	data, _ := json.Marshal(s)
	var v any
	_ = json.Unmarshal(data, &v)
	return v
}

// isTypeMismatch reports whether err is encoding/json refusing a JSON
// value of the wrong type for a field. The reference's YAML decoder is
// looser there: it reads a number or boolean into a string field
// ("path": 0 becomes "0") and a whole number written with a fraction or
// exponent into an integer field ("major": 1.0). DecodeSpec refuses both;
// specs that cdi writes never contain them. Field names are another
// matter: both sides refuse the same unknown, miscased and repeated
// fields.
func isTypeMismatch(err error) bool {
	var te *json.UnmarshalTypeError
	return errors.As(err, &te)
}
