package cdiref

import (
	"strings"
	"testing"

	"github.com/dranode/dranode/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// handNames are inputs chosen for the edges of the language; the
// exhaustive sweep below covers the short strings.
var handNames = []string{
	"nvidia.com/gpu=0",
	"k8s.gpu.example.com/claim=0f3c2a9e-7b1d-4c3e-9f8a-2b6d5e4c1a00-gpu-3",
	// One-character vendor or class: v1.1.0 of the reference panicked.
	"a/b=c", "a.b/c=d", "a/b.c=d", "a/b=1", "A/B=C", "x/y=z:0",
	// Empty parts and missing or extra separators.
	"", "/", "=", "/=", "a/=", "/b=", "a/b=", "/a/b=c", "a//b=c", "a/b==c", "=a/b", "a=b/c",
	"a/b/c=d", "a/b=c/d", "a/b=c=d", "a/b", "a=b", "ab", "a/b=c/", "a/b=/c",
	// Leading and trailing punctuation.
	".a/b=c", "a./b=c", "a/.b=c", "a/b.=c", "a/b=.c", "a/b=c.", "a/b=c:", "a/b=:c",
	"a_/b=c", "a/b_=c", "a/b=c_", "a-/b=c", "a/b=-c", "a:b/c=d", "a/b:c=d",
	// Letters and digits outside ASCII: the reference (v1.1.1) accepts ASCII only.
	"é/b=c", "aé/b=c", "a/é=c", "a/b=é", "a/b=aé", "a/b=éa", "a/b=١", "a/b=a١b", "ǅ/b=c",
	"a/b=c\xff", "\xff/b=c", "a\xffb/c=d", "a/b=c\x00", "a/b=\u200bc",
	// Whitespace.
	" a/b=c", "a /b=c", "a/b =c", "a/b= c", "a/b=c ", "a/b=c\n",
	// Long names.
	strings.Repeat("v", 500) + "/" + strings.Repeat("c", 500) + "=" + strings.Repeat("n", 500),
	strings.Repeat("v", 500) + "/" + strings.Repeat("c", 500) + "=" + strings.Repeat("n", 499) + "-",
}

// alphabet is the adversarial alphabet for the exhaustive sweep: every
// character class of the grammar, both separators, a multi-byte letter and
// an invalid byte.
var alphabet = []string{"a", "1", "/", "=", ".", "-", ":", "é", "\xff"}

func allStrings(maxLen int) []string {
	out := []string{""}
	level := []string{""}
	for range maxLen {
		var next []string
		for _, prefix := range level {
			for _, c := range alphabet {
				next = append(next, prefix+c)
			}
		}
		out = append(out, next...)
		level = next
	}
	return out
}

// compareParse reports how ParseQualifiedName and the three validators
// disagree with the reference on input, or "" when they agree.
func compareParse(input string) string {
	rv, rc, rn, rerr := parser.ParseQualifiedName(input)
	v, c, n, err := cdi.ParseQualifiedName(input)
	if (rerr == nil) != (err == nil) {
		return "accept/reject: reference error " + errString(rerr) + ", ours " + errString(err)
	}
	if rv != v || rc != c || rn != n {
		return "parts: reference (" + rv + ", " + rc + ", " + rn + "), ours (" + v + ", " + c + ", " + n + ")"
	}
	if parser.IsQualifiedName(input) != cdi.IsQualifiedName(input) {
		return "IsQualifiedName"
	}
	for _, pair := range []struct {
		what     string
		ref, our error
	}{
		{"vendor", parser.ValidateVendorName(input), cdi.ValidateVendorName(input)},
		{"class", parser.ValidateClassName(input), cdi.ValidateClassName(input)},
		{"device", parser.ValidateDeviceName(input), cdi.ValidateDeviceName(input)},
	} {
		if (pair.ref == nil) != (pair.our == nil) {
			return pair.what + " validator: reference " + errString(pair.ref) + ", ours " + errString(pair.our)
		}
	}
	return ""
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func TestParseDifferentialTable(t *testing.T) {
	for _, input := range handNames {
		if diff := compareParse(input); diff != "" {
			t.Errorf("%q: %s", input, diff)
		}
	}
}

// Every string of up to 5 symbols from the alphabet (66430 strings), each
// also as the vendor, class and device part of a name.
func TestParseDifferentialExhaustive(t *testing.T) {
	inputs := allStrings(5)
	accepted := 0
	for _, s := range inputs {
		for _, input := range []string{s, s + "/b=c", "a/" + s + "=c", "a/b=" + s} {
			if diff := compareParse(input); diff != "" {
				t.Fatalf("%q: %s", input, diff)
			}
			if cdi.IsQualifiedName(input) {
				accepted++
			}
		}
	}
	// The sweep must exercise both outcomes in bulk, or it proves little.
	if total := 4 * len(inputs); accepted < 500 || total-accepted < 500 {
		t.Fatalf("%d of %d inputs accepted: the sweep is lopsided", accepted, total)
	}
	t.Logf("%d inputs, %d accepted by both", 4*len(inputs), accepted)
}

func FuzzParseDifferential(f *testing.F) {
	for _, s := range handNames {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		if diff := compareParse(input); diff != "" {
			t.Fatalf("%q: %s", input, diff)
		}
	})
}

var benchNames = []struct{ name, input string }{
	{"typical", "k8s.gpu.example.com/claim=0f3c2a9e-7b1d-4c3e-9f8a-2b6d5e4c1a00-gpu-3"},
	{"short", "nvidia.com/gpu=0"},
}

var sink string

// BenchmarkParse compares parse+validate of one name by both
// implementations in one run.
func BenchmarkParse(b *testing.B) {
	impls := []struct {
		name  string
		parse func(string) (string, string, string, error)
	}{
		{"reference", parser.ParseQualifiedName},
		{"dranode", cdi.ParseQualifiedName},
	}
	for _, impl := range impls {
		for _, bn := range benchNames {
			b.Run("impl="+impl.name+"/name="+bn.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_, _, n, err := impl.parse(bn.input)
					if err != nil {
						b.Fatal(err)
					}
					sink = n
				}
			})
		}
	}
}
