package record_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"

	"github.com/dranode/dranode/agent/internal/record"
)

// onlyInstance is the agent of a node with one instance: nothing to hand
// over, so the callbacks are never called.
type onlyInstance struct{}

func (onlyInstance) Stopping() error  { return nil }
func (onlyInstance) StopPublishing()  {}
func (onlyInstance) ForwardTo(string) {}
func (onlyInstance) Reclaimed()       {}

// A record operation runs inside Enter: a hand-over waits for it.
func ExampleHolder_Enter() {
	dir, err := os.MkdirTemp("", "record-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	h := record.New(record.Config{Dir: filepath.Join(dir, "claims.record"), StateDir: dir, Log: logr.Discard()}, onlyInstance{})
	if err := h.Open(context.Background(), "3f1c2b9e-0000-4000-8000-000000000001"); err != nil {
		panic(err)
	}
	defer h.Close()
	if leave, held := h.Enter(); held {
		fmt.Println("claims in the record:", h.Cache().Len())
		leave()
	}
	// Output: claims in the record: 0
}
