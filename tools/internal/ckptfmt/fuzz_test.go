package ckptfmt

import (
	"errors"
	"testing"
)

// FuzzParse: any bytes give a result or a typed error, never a panic; a
// result without error re-verifies the same way.
func FuzzParse(f *testing.F) {
	f.Add(file("DRNFILE1", `{"kind":"k","version":1}`, `{"x":1}`))
	f.Add(file("DRNJLOG1", `{"kind":"k","version":0,"generation":1}`, "P\x01a\x02{}", "D\x01a"))
	f.Add(file("DRNSNAP1", `{"kind":"k","version":1,"generation":2,"records":1}`, "P\x01a\x02[]"))
	f.Add([]byte(`{"Data":"x","Checksum":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		switch {
		case errors.Is(err, ErrNotDranode):
			if p != nil {
				t.Fatal("ErrNotDranode with a result")
			}
		case err != nil:
			var ce *CorruptError
			if !errors.As(err, &ce) || p == nil {
				t.Fatalf("untyped error %T %v or nil result", err, err)
			}
		default:
			if p.Header.Kind == "" || p.Header.Version < 0 {
				t.Fatalf("accepted header %+v", p.Header)
			}
			for _, r := range p.Records {
				if r.Offset < 16 || int(r.Offset) >= len(data) {
					t.Fatalf("record offset %d outside the file", r.Offset)
				}
			}
		}
	})
}
