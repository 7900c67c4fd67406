package agent

import (
	"fmt"

	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/dranode/dranode/sliceclient"
)

// nodeClient is the API client of the agent: the two API groups it and
// sliceclient use (resource.k8s.io/v1 for claims and slices, core/v1 for
// the Node that owns the slices).
//
// kubernetes.NewForConfig would build a typed client for every API group;
// the linker then keeps all of their code, and the agent's resident memory
// grows with the text pages of clients it never calls (see BENCHMARKS.md).
type nodeClient struct {
	core     corev1client.CoreV1Interface
	resource resourcev1client.ResourceV1Interface
}

func (c nodeClient) CoreV1() corev1client.CoreV1Interface             { return c.core }
func (c nodeClient) ResourceV1() resourcev1client.ResourceV1Interface { return c.resource }

// newNodeClient builds the agent's client from rc; both groups share one
// HTTP client (one connection pool, one rate limiter from rc).
func newNodeClient(rc *rest.Config) (sliceclient.Client, error) {
	rc = rest.CopyConfig(rc)
	if rc.UserAgent == "" {
		rc.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if rc.RateLimiter == nil && rc.QPS > 0 {
		// One limiter for both groups, as kubernetes.NewForConfig does.
		rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst)
	}
	httpClient, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	core, err := corev1client.NewForConfigAndClient(rc, httpClient)
	if err != nil {
		return nil, fmt.Errorf("API client (core/v1): %w", err)
	}
	resource, err := resourcev1client.NewForConfigAndClient(rc, httpClient)
	if err != nil {
		return nil, fmt.Errorf("API client (resource.k8s.io/v1): %w", err)
	}
	return nodeClient{core: core, resource: resource}, nil
}
