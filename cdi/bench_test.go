package cdi

import (
	"fmt"
	"testing"
)

var benchNames = []struct{ name, input string }{
	{"typical", "k8s.gpu.example.com/claim=0f3c2a9e-7b1d-4c3e-9f8a-2b6d5e4c1a00-gpu-3"},
	{"short", "nvidia.com/gpu=0"},
}

var sinkVendor, sinkClass, sinkName string

func BenchmarkParseQualifiedName(b *testing.B) {
	for _, bn := range benchNames {
		b.Run("name="+bn.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v, c, n, err := ParseQualifiedName(bn.input)
				if err != nil {
					b.Fatal(err)
				}
				sinkVendor, sinkClass, sinkName = v, c, n
			}
		})
	}
}

func BenchmarkValidateSpec(b *testing.B) {
	spec := claimSpec("k8s.gpu.example.com/claim", testClaimUID)
	b.ReportAllocs()
	for b.Loop() {
		if err := spec.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSpecDirWrite is one durable spec write: encode, temp file,
// fsync, rename, fsync of the directory. Its floor is the disk's.
func BenchmarkSpecDirWrite(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		b.Run(fmt.Sprintf("nosync=%v", noSync), func(b *testing.B) {
			d := SpecDir{Path: b.TempDir(), NoSync: noSync}
			spec := claimSpec("k8s.gpu.example.com/claim", testClaimUID)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Write(spec, testClaimUID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
