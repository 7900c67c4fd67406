package cdi

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func FuzzParseQualifiedName(f *testing.F) {
	for _, s := range []string{"nvidia.com/gpu=0", "a/b=c", "a/b", "/a=b", "a/b=c=d", "a/b/c=d", "é/b=c", "a/b=c\xff", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		vendor, class, name, err := ParseQualifiedName(input)
		// The fast scanner and the rule-by-rule explainer must agree: the
		// explainer finds nothing wrong exactly when the scanner accepts.
		var explained *NameError
		errors.As(explainQualified(input), &explained)
		if nothingWrong := explained.Reason == reasonNoRuleBroken; nothingWrong != (err == nil) {
			t.Fatalf("scanner error %v, explainer %v", err, explained)
		}
		if _, _, ok := scanQualified(input); ok != (err == nil) {
			t.Fatalf("scanner says %v, ParseQualifiedName %v", ok, err)
		}
		if IsQualifiedName(input) != (err == nil) {
			t.Fatalf("IsQualifiedName disagrees with ParseQualifiedName (%v)", err)
		}
		if err != nil {
			var ne *NameError
			if !errors.As(err, &ne) || !errors.Is(err, ErrInvalidName) {
				t.Fatalf("error %#v is not a *NameError", err)
			}
			if vendor != "" || class != "" || name != input {
				t.Fatalf("on error got parts (%q, %q, %q)", vendor, class, name)
			}
			if ne.Offset >= len(ne.Value) || (ne.Offset < 0 && ne.Part != PartQualifiedName && ne.Value != "") {
				t.Fatalf("offset %d out of range for %q (%v)", ne.Offset, ne.Value, err)
			}
			_ = err.Error()
			return
		}
		if QualifiedName(vendor, class, name) != input {
			t.Fatalf("parts (%q, %q, %q) do not rebuild %q", vendor, class, name, input)
		}
		for what, err := range map[string]error{
			"vendor": ValidateVendorName(vendor), "class": ValidateClassName(class), "name": ValidateDeviceName(name),
		} {
			if err != nil {
				t.Fatalf("parsed %s rejected by its validator: %v", what, err)
			}
		}
	})
}

func FuzzQualifiedNameRoundTrip(f *testing.F) {
	f.Add("nvidia.com", "gpu", "0")
	f.Add("a", "b", "c")
	f.Add("a/b", "c", "d")
	f.Add("a", "b=c", "d")
	f.Fuzz(func(t *testing.T, vendor, class, name string) {
		valid := ValidateVendorName(vendor) == nil && ValidateClassName(class) == nil && ValidateDeviceName(name) == nil
		v, c, n, err := ParseQualifiedName(QualifiedName(vendor, class, name))
		if valid != (err == nil) {
			t.Fatalf("parts valid=%v but parse error %v", valid, err)
		}
		if valid && (v != vendor || c != class || n != name) {
			t.Fatalf("round trip gave (%q, %q, %q)", v, c, n)
		}
	})
}

func FuzzDecodeSpec(f *testing.F) {
	files, _ := filepath.Glob("testdata/specs/*.json")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"kind":"a/b","kind":"c"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := DecodeSpec(data)
		if err != nil {
			return
		}
		_ = spec.Validate()
		_ = MinimumVersion(spec)
		out, err := spec.Encode()
		if err != nil {
			t.Fatalf("decoded spec does not encode: %v", err)
		}
		again, err := DecodeSpec(out)
		if err != nil {
			t.Fatalf("our own encoding does not decode: %v\n%s", err, out)
		}
		out2, err := again.Encode()
		if err != nil || string(out2) != string(out) {
			t.Fatalf("encoding is not stable:\n%s\n%s", out, out2)
		}
		if (spec.Validate() == nil) != (again.Validate() == nil) || versionRank(MinimumVersion(again)) > versionRank(MinimumVersion(spec)) {
			t.Fatalf("validity or minimum version changed by a round trip:\n%s", out)
		}
	})
}
