package sliceclient

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestSliceName(t *testing.T) {
	long := strings.Repeat("a", 250)
	tests := []struct{ node, driver, pool string }{
		{"node-1", "gpu.example.com", "pool"},
		{"node-1", "gpu.example.com", "rack-1/pool.a"},
		{long, "gpu.example.com", long},
		{"a-b", "c.d", "e"},
		{"a", "b-c.d", "e"},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		for i := range 3 {
			name := SliceName(tt.node, tt.driver, tt.pool, i)
			if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
				t.Errorf("%q is not a DNS subdomain: %v", name, msgs)
			}
			key := tt.node + "|" + tt.driver + "|" + tt.pool
			if other, dup := seen[name]; dup && other != key {
				t.Errorf("%q names both %s and %s", name, other, key)
			}
			seen[name] = key
			if got, ok := sliceIndex(tt.node, tt.driver, tt.pool, name); !ok || got != i {
				t.Errorf("sliceIndex(%q) = %d, %v; want %d", name, got, ok, i)
			}
			if _, ok := sliceIndex(tt.node, tt.driver, tt.pool+"x", name); ok {
				t.Errorf("%q claimed by another pool", name)
			}
		}
	}
	if SliceName("n", "d.e", "p", 0) != SliceName("n", "d.e", "p", 0) {
		t.Fatal("not deterministic")
	}
}
