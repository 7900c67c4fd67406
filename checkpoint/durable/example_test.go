package durable_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/dranode/dranode/checkpoint/durable"
)

func ExampleWriteFile() {
	dir, err := os.MkdirTemp("", "durable-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	path := filepath.Join(dir, "state.json")
	if err := durable.WriteFile(path, []byte(`{"v":1}`), 0o600); err != nil {
		log.Fatal(err)
	}
	// Replacing it: a crash in between leaves {"v":1} or {"v":2}, whole.
	if err := durable.WriteFile(path, []byte(`{"v":2}`), 0o600); err != nil {
		log.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	fmt.Println(string(data))
	// Output: {"v":2}
}

func ExampleWriter() {
	dir, err := os.MkdirTemp("", "durable-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	var syncs atomic.Uint64
	w := durable.Writer{Syncs: &syncs}
	if err := w.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644); err != nil {
		log.Fatal(err)
	}
	// A removal is durable once the directory is synced.
	if err := os.Remove(filepath.Join(dir, "a")); err != nil {
		log.Fatal(err)
	}
	if err := w.SyncDir(dir); err != nil {
		log.Fatal(err)
	}
	fmt.Println("fsyncs:", syncs.Load())

	// On a tmpfs, or for files rebuilt after a reboot anyway:
	fast := durable.Writer{NoSync: true, Syncs: &syncs}
	if err := fast.WriteFile(filepath.Join(dir, "b"), []byte("b"), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Println("fsyncs after NoSync:", syncs.Load())
	// Output:
	// fsyncs: 3
	// fsyncs after NoSync: 3
}
