package claimcache

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestGarbageCollection(t *testing.T) {
	dir := t.TempDir()
	c, _ := openT(t, dir, bootOne)
	for i := range 6 {
		ref := ClaimRef{Namespace: "ns", Name: fmt.Sprint("c", i), UID: fmt.Sprint("u", i)}
		if _, err := c.StartPrepare(ref, "pod"); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := c.FinishPrepare(ref.UID, gpuDevices); err != nil {
				t.Fatal(err)
			}
		}
	}
	alive := map[string]bool{"u1": true, "u4": true}
	exists := func(r ClaimRef) (bool, error) { return alive[r.UID], nil }

	gone, err := c.Gone(exists)
	if err != nil {
		t.Fatal(err)
	}
	if got := uids(gone); got != "u0 u2 u3 u5" {
		t.Fatalf("Gone: %s", got)
	}
	if c.Len() != 6 {
		t.Fatalf("Gone removed entries: %d left", c.Len())
	}

	apiDown := errors.New("connection refused")
	_, err = c.DropGone(func(ClaimRef) (bool, error) { return false, apiDown })
	if !errors.Is(err, apiDown) || !strings.Contains(err.Error(), "does ns/") {
		t.Fatalf("DropGone with a failing exists: %v", err)
	}
	if c.Len() != 6 {
		t.Fatalf("a failed DropGone removed entries: %d left", c.Len())
	}

	dropped, err := c.DropGone(exists)
	if err != nil {
		t.Fatal(err)
	}
	if got := uids(dropped); got != "u0 u2 u3 u5" {
		t.Fatalf("DropGone: %s", got)
	}
	// The caller gets the devices of what was dropped.
	if dropped[0].Drivers == nil {
		t.Fatalf("dropped entry lost its devices: %+v", dropped[0])
	}
	c.Close()
	c, _ = openT(t, dir, bootOne)
	defer c.Close()
	if got := uids(c.List()); got != "u1 u4" {
		t.Fatalf("after DropGone and reopen: %s", got)
	}
	// A dropped claim's name is free again.
	if _, err := c.StartPrepare(ClaimRef{Namespace: "ns", Name: "c0", UID: "u0-new"}, ""); err != nil {
		t.Fatalf("StartPrepare on a dropped claim's name: %v", err)
	}
}

func uids(es []Entry) string {
	var out []string
	for _, e := range es {
		out = append(out, e.Claim.UID)
	}
	return strings.Join(out, " ")
}

func TestReadBootID(t *testing.T) {
	raw, err := os.ReadFile(BootIDPath)
	if err != nil {
		t.Skipf("no boot ID on this system: %v", err)
	}
	id, err := ReadBootID()
	if err != nil {
		t.Fatal(err)
	}
	if id != strings.TrimSpace(string(raw)) || strings.ContainsAny(id, " \n") || id == "" {
		t.Fatalf("ReadBootID = %q, file holds %q", id, raw)
	}
}
