package claimcache

import (
	"errors"
	"fmt"
	"testing"
)

func openT(t testing.TB, dir, boot string) (*Cache, *RestoreReport) {
	t.Helper()
	c, rep, err := Open(dir, boot)
	if err != nil {
		t.Fatalf("Open(%s, %s): %v", dir, boot, err)
	}
	return c, rep
}

// crash abandons c the way a killed process would: nothing is flushed or
// finished, only the journal's files (and with them its lock) are let go.
func crash(t testing.TB, c *Cache) {
	t.Helper()
	c.life.Lock()
	c.closed = true
	c.life.Unlock()
	if err := c.journal.Close(); err != nil {
		t.Fatalf("abandon journal: %v", err)
	}
}

// errKind reduces an error to what the tests compare: its kind and the
// fields of its typed error.
func errKind(err error) string {
	var te *TransitionError
	var me *UIDMismatchError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &te):
		if !errors.Is(err, ErrIllegalTransition) {
			return "TransitionError not matching ErrIllegalTransition"
		}
		return fmt.Sprintf("illegal %s from %s stale=%v", te.Op, te.From, te.Stale)
	case errors.As(err, &me):
		if !errors.Is(err, ErrUIDMismatch) {
			return "UIDMismatchError not matching ErrUIDMismatch"
		}
		return fmt.Sprintf("uid mismatch %s/%s recorded %s requested %s", me.Namespace, me.Name, me.RecordedUID, me.RequestedUID)
	case errors.Is(err, ErrNotFound):
		return "not found"
	case errors.Is(err, ErrInvalidArgument):
		return "invalid"
	}
	return "unexpected: " + err.Error()
}

var gpuDevices = map[string][]Device{
	"gpu.example.com": {
		{Pool: "node-a", Device: "gpu-0", Requests: []string{"gpu"}, CDIDeviceIDs: []string{"example.com/gpu=gpu-0"}},
		{Pool: "node-a", Device: "gpu-1", Requests: []string{"gpu"}, ShareID: "s-1", CDIDeviceIDs: []string{"example.com/gpu=gpu-1"}},
	},
	"nic.example.com": {
		{Pool: "node-a", Device: "eth1", Requests: []string{"net"}, CDIDeviceIDs: []string{"example.com/nic=eth1", "example.com/nic=common"}},
	},
}
