package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/claimcache"
)

// heldSource is a ClaimSource whose reads wait until release is closed, so
// that a test can look at the record while a claim is being read.
type heldSource struct {
	ClaimSource
	reading chan string // gets the claim's name when a read starts
	release chan struct{}
}

func (s *heldSource) GetClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	s.reading <- name
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.ClaimSource.GetClaim(ctx, namespace, name)
}

// A claim new to the record is recorded as PrepareStarted while it is
// being read (the commit overlaps the read); one whose name the record
// holds under another UID is not, as that case may unprepare the other
// claim and is decided after the read.
func TestNewClaimRecordedWhileRead(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	src := &heldSource{ClaimSource: DirClaimSource{Dir: e.claimsDir}, reading: make(chan string, 1), release: make(chan struct{})}
	a := e.start(t, Options{Claims: src})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	first := claim("default", "first", "00000000-0000-0000-0000-0000000000a1", "node-a", [2]string{gpuDriver, "gpu-0"})
	e.writeClaim(t, first)
	done := make(chan error, 1)
	go func() {
		_, err := a.Prepare(ctx, gpuDriver, ClaimRequest{Namespace: first.Namespace, Name: first.Name, UID: string(first.UID)})
		done <- err
	}()
	<-src.reading
	waitRecorded(t, a, string(first.UID), claimcache.PrepareStarted)
	close(src.release)
	if err := <-done; err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if e, err := a.record.cache.Get(string(first.UID)); err != nil || e.State != claimcache.Prepared {
		t.Fatalf("after the prepare: %+v, %v", e, err)
	}

	// The same name under a new UID: nothing is recorded for it during the
	// read, and the read tells that the kubelet asked for a stale UID.
	src.release = make(chan struct{}) // no read is running
	stale := ClaimRequest{Namespace: first.Namespace, Name: first.Name, UID: "00000000-0000-0000-0000-0000000000a2"}
	go func() {
		_, err := a.Prepare(ctx, gpuDriver, stale)
		done <- err
	}()
	<-src.reading
	time.Sleep(50 * time.Millisecond) // what an early commit would take, many times over
	if e, err := a.record.cache.Get(stale.UID); !errors.Is(err, claimcache.ErrNotFound) {
		t.Errorf("claim %s recorded during its read although its name is recorded under another UID: %+v, %v", stale.UID, e, err)
	}
	close(src.release)
	if err := <-done; !errors.Is(err, ErrClaimNotUsable) {
		t.Fatalf("prepare of a stale UID: %v, want ErrClaimNotUsable", err)
	}
	if e, err := a.record.cache.Get(string(first.UID)); err != nil || e.State != claimcache.Prepared {
		t.Errorf("the recorded claim after a stale UID's prepare: %+v, %v", e, err)
	}
}

func waitRecorded(t *testing.T, a *Agent, uid string, state claimcache.State) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		e, err := a.record.cache.Get(uid)
		if err == nil && e.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %s not recorded as %s while it is read: %+v, %v", uid, state, e, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
