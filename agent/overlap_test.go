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

// A claim is recorded as PrepareStarted only once it has been read and
// found usable, whether the record knows nothing of it or holds its name
// under another UID (a case that may unprepare the other claim): while the
// read is held, the record does not know the claim. Prepare reads top to
// bottom; the overlap of the commit with the read that an earlier version
// had did not pay (BENCHMARKS.md, "Recording while the claim is read").
func TestClaimRecordedOnlyAfterRead(t *testing.T) {
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
	<-src.reading // the Prepare waits in the read: nothing after it has run
	if e, err := a.record.Cache().Get(string(first.UID)); !errors.Is(err, claimcache.ErrNotFound) {
		t.Errorf("claim %s recorded before its read returned: %+v, %v", first.UID, e, err)
	}
	close(src.release)
	if err := <-done; err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if e, err := a.record.Cache().Get(string(first.UID)); err != nil || e.State != claimcache.Prepared {
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
	if e, err := a.record.Cache().Get(stale.UID); !errors.Is(err, claimcache.ErrNotFound) {
		t.Errorf("claim %s recorded during its read although its name is recorded under another UID: %+v, %v", stale.UID, e, err)
	}
	close(src.release)
	if err := <-done; !errors.Is(err, ErrClaimNotUsable) {
		t.Fatalf("prepare of a stale UID: %v, want ErrClaimNotUsable", err)
	}
	if e, err := a.record.Cache().Get(string(first.UID)); err != nil || e.State != claimcache.Prepared {
		t.Errorf("the recorded claim after a stale UID's prepare: %+v, %v", e, err)
	}
}
