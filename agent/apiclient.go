package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/dranode/dranode/sliceclient"
)

// The agent's API scheme knows core/v1 and resource.k8s.io/v1 and nothing
// else. client-go's typed clients use k8s.io/client-go/kubernetes/scheme,
// whose init registers the types of every API group (50-odd group
// versions): importing any typed client package makes the agent touch, at
// start, code and type data spread over ~8 MB of its binary, which then
// stay resident. Measured in BENCHMARKS.md ("Memory").
var (
	apiScheme         = runtime.NewScheme()
	apiCodecs         = serializer.NewCodecFactory(apiScheme)
	apiParameterCodec = runtime.NewParameterCodec(apiScheme)
)

func init() {
	// The unversioned meta types (options, Status, WatchEvent) that every
	// request and watch encodes or decodes.
	metav1.AddToGroupVersion(apiScheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(corev1.AddToScheme(apiScheme))
	utilruntime.Must(resourcev1.AddToScheme(apiScheme))
}

// apiClient is the API client of the agent: ResourceSlices and Nodes for
// sliceclient, ResourceClaims for prepares. Both groups share one HTTP
// client (one connection pool) and one rate limiter.
type apiClient struct {
	slices sliceclient.Client
	claims ClaimSource
	// resource is the resource.k8s.io/v1 client, for claim status writes.
	resource rest.Interface
	core     rest.Interface
	// minor is the API server's Kubernetes minor (1.<minor>) once
	// askServerMinor learnt it; 0 while unknown.
	minor     atomic.Int64
	minorOnce sync.Once
	// probeOnce runs Agent.probeServer's dry-run creates once per agent.
	probeOnce sync.Once
}

// askServerMinor learns the API server's Kubernetes minor from /version
// (readable by every client), once; a failure leaves it unknown (0), which
// checks nothing, and is logged.
func (c *apiClient) askServerMinor(ctx context.Context, log logr.Logger) {
	c.minorOnce.Do(func() {
		raw, err := c.core.Get().AbsPath("/version").Do(ctx).Raw()
		var v struct{ Major, Minor, GitVersion string }
		if err == nil {
			err = json.Unmarshal(raw, &v)
		}
		var minor int
		if err == nil {
			minor, err = strconv.Atoi(strings.TrimRight(v.Minor, "+"))
		}
		if err != nil || v.Major != "1" {
			log.Error(err, "Reading the API server's version: what the agent writes is not checked against it", "version", v.GitVersion)
			return
		}
		c.minor.Store(int64(minor))
		log.Info("API server version", "version", v.GitVersion)
	})
}

// newAPIClient builds the agent's client from rc.
func newAPIClient(rc *rest.Config) (*apiClient, error) {
	rc, httpClient, err := httpClientFor(rc)
	if err != nil {
		return nil, err
	}
	core, err := groupClient(rc, httpClient, "/api", corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	resource, err := groupClient(rc, httpClient, "/apis", resourcev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &apiClient{
		slices: sliceclient.Client{
			ResourceSlices: gentype.NewClientWithList("resourceslices", resource, apiParameterCodec, "",
				func() *resourcev1.ResourceSlice { return &resourcev1.ResourceSlice{} },
				func() *resourcev1.ResourceSliceList { return &resourcev1.ResourceSliceList{} },
				gentype.PrefersProtobuf[*resourcev1.ResourceSlice]()),
			Nodes: gentype.NewClient("nodes", core, apiParameterCodec, "",
				func() *corev1.Node { return &corev1.Node{} },
				gentype.PrefersProtobuf[*corev1.Node]()),
		},
		claims:   APIClaimSource{REST: resource},
		resource: resource,
		core:     core,
	}, nil
}

// NewAPIClaimSource returns the claim source the agent reads claims with
// when it has an API server: one quorum GET per claim through a client of
// resource.k8s.io/v1 on the agent's own scheme, which links no typed
// client-go package, with rc's QPS, burst and content type. An embedder
// that wraps the agent's claim source (to count, trace or cache its reads)
// passes the wrapper as Options.Claims.
func NewAPIClaimSource(rc *rest.Config) (APIClaimSource, error) {
	rc, httpClient, err := httpClientFor(rc)
	if err != nil {
		return APIClaimSource{}, err
	}
	resource, err := groupClient(rc, httpClient, "/apis", resourcev1.SchemeGroupVersion)
	if err != nil {
		return APIClaimSource{}, err
	}
	return APIClaimSource{REST: resource}, nil
}

// httpClientFor completes a copy of rc as client-go's clientsets do (user
// agent, one rate limiter for every API group) and returns the HTTP client,
// and so the connection pool, that the group clients built on it share.
func httpClientFor(rc *rest.Config) (*rest.Config, *http.Client, error) {
	rc = rest.CopyConfig(rc)
	if rc.UserAgent == "" {
		rc.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if rc.RateLimiter == nil && rc.QPS > 0 {
		rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst)
	}
	httpClient, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("API client: %w", err)
	}
	return rc, httpClient, nil
}

// groupClient is a REST client for one API group version on the shared
// HTTP client, configured as client-go's generated clients are.
func groupClient(rc *rest.Config, httpClient *http.Client, apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := *rc
	c.APIPath = apiPath
	c.GroupVersion = &gv
	c.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(apiScheme, apiCodecs).WithoutConversion()
	client, err := rest.RESTClientForConfigAndClient(&c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("API client (%s): %w", gv, err)
	}
	return client, nil
}
