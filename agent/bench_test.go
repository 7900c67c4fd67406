package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

// memClaims is an in-memory ClaimSource, so that benchmarks measure the
// agent and the plugin, not YAML decoding or an API server.
type memClaims struct {
	mu     sync.Mutex
	claims map[string]*resourcev1.ResourceClaim
}

func (m *memClaims) put(c *resourcev1.ResourceClaim) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.claims == nil {
		m.claims = map[string]*resourcev1.ResourceClaim{}
	}
	m.claims[c.Namespace+"/"+c.Name] = c
}

func (m *memClaims) GetClaim(_ context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.claims[namespace+"/"+name]
	if !ok {
		return nil, fmt.Errorf("%w: %s/%s", ErrClaimNotFound, namespace, name)
	}
	return c.DeepCopy(), nil
}

// benchClaims are n claims, claim i with GPU i: a device is one claim's at
// a time (exclusive.go); the environment needs n GPUs (withGPUs).
func benchClaims(n int) []*resourcev1.ResourceClaim {
	out := make([]*resourcev1.ResourceClaim, n)
	for i := range out {
		out[i] = claim("bench", fmt.Sprintf("c%03d", i), fmt.Sprintf("00000000-0000-0000-00bb-%012d", i), "node-a", [2]string{gpuDriver, fmt.Sprintf("gpu-%d", i)})
	}
	return out
}

// withGPUs has every plugin of the environment publish at least n GPUs.
func (e *testEnv) withGPUs(n int) *testEnv {
	for _, d := range e.cfg.Plugins.Drivers {
		if n > d.Config["numDevices"].(int) {
			d.Config["numDevices"] = n
		}
	}
	return e
}

func request(claims []*resourcev1.ResourceClaim) []*drapbv1.Claim {
	var out []*drapbv1.Claim
	for _, c := range claims {
		out = append(out, &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	return out
}

// benchPrepareUnprepare measures one NodePrepareResources call for n claims
// and the matching NodeUnprepareResources through the DRA socket: claim
// lookup, durable record commits, the gpu-plugin's Prepare over go-plugin
// gRPC, CDI spec writes (fsync), and the reverse.
func benchPrepareUnprepare(b *testing.B, n int) {
	e := newTestEnv(b, gpuDriver).withGPUs(n)
	src := &memClaims{}
	claims := benchClaims(n)
	for _, c := range claims {
		src.put(c)
	}
	e.start(b, Options{Claims: src})
	k := connectKubelet(b, e.cfg, gpuDriver)
	req := request(claims)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		resp, err := k.dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: req})
		if err != nil {
			b.Fatal(err)
		}
		for uid, r := range resp.Claims {
			if r.Error != "" {
				b.Fatalf("%s: %s", uid, r.Error)
			}
		}
		uresp, err := k.dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: req})
		if err != nil {
			b.Fatal(err)
		}
		for uid, r := range uresp.Claims {
			if r.Error != "" {
				b.Fatalf("%s: %s", uid, r.Error)
			}
		}
	}
}

func BenchmarkPrepareUnprepare1(b *testing.B)  { benchPrepareUnprepare(b, 1) }
func BenchmarkPrepareUnprepare50(b *testing.B) { benchPrepareUnprepare(b, 50) }

// BenchmarkPrepareFromRecord: the kubelet asks again for a claim prepared
// in this boot (every container start of a pod does): answered from the
// record, no plugin call, no write.
func BenchmarkPrepareFromRecord(b *testing.B) {
	e := newTestEnv(b, gpuDriver)
	src := &memClaims{}
	c := benchClaims(1)[0]
	src.put(c)
	e.start(b, Options{Claims: src})
	k := connectKubelet(b, e.cfg, gpuDriver)
	req := &drapbv1.NodePrepareResourcesRequest{Claims: request([]*resourcev1.ResourceClaim{c})}
	ctx := context.Background()
	if _, err := k.dra.NodePrepareResources(ctx, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		resp, err := k.dra.NodePrepareResources(ctx, req)
		if err != nil || resp.Claims[string(c.UID)].Error != "" {
			b.Fatal(err, resp)
		}
	}
}

// slowClaims answers like an API server: after a round trip.
type slowClaims struct {
	ClaimSource
	rtt time.Duration
}

func (s slowClaims) GetClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	time.Sleep(s.rtt) // the API server's latency, not a wait for an event
	return s.ClaimSource.GetClaim(ctx, namespace, name)
}

// BenchmarkPrepareUnprepareAPILatency1: one claim whose read takes 1.3 ms,
// the claim-fetch p50 measured through a real API server (BENCHMARKS.md):
// what a prepare costs when reading the claim is not free.
func BenchmarkPrepareUnprepareAPILatency1(b *testing.B) {
	e := newTestEnv(b, gpuDriver)
	src := &memClaims{}
	claims := benchClaims(1)
	src.put(claims[0])
	e.start(b, Options{Claims: slowClaims{ClaimSource: src, rtt: 1300 * time.Microsecond}})
	k := connectKubelet(b, e.cfg, gpuDriver)
	req := request(claims)
	ctx := context.Background()
	for b.Loop() {
		if _, err := k.dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: req}); err != nil {
			b.Fatal(err)
		}
		if _, err := k.dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: req}); err != nil {
			b.Fatal(err)
		}
	}
}
