package checkpoint

import (
	"testing"
)

func TestSmoke(t *testing.T) {
	dir := t.TempDir()
	s := Schema{Kind: "test/x", Version: 1}
	f, err := OpenFile[map[string]int](dir+"/f", s)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Save(map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	v, err := f.Load()
	if err != nil || v["a"] != 1 {
		t.Fatal(v, err)
	}
	f.Close()
	j, err := OpenJournal[int](dir+"/j", s, WithCompaction(100, 1))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := j.Put("k"+string(rune('a'+i%26)), i); err != nil {
			t.Fatal(err)
		}
	}
	j.Delete("ka")
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, err = OpenJournal[int](dir+"/j", s)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(j.Snapshot(), j.Fsyncs())
	j.Close()
}
