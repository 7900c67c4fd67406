package cli

import (
	"context"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// resourceAPI is dranodectl's client of resource.k8s.io/v1: the two reads it
// makes (a claim by name, ResourceSlices by field selector) through the
// dynamic client, decoded into the API's types. client-go's typed clients
// would link k8s.io/client-go/kubernetes/scheme, which registers every API
// group: 14 MB more Go source for every platform the image ships
// (DESIGN.md, "One build variant"), for two requests an operator makes by
// hand. The agent keeps its own narrow scheme for the same reason
// (agent/apiclient.go) and prefers protobuf; a command-line tool gains
// nothing from that.
type resourceAPI struct {
	dyn dynamic.Interface
}

// newResourceAPI builds the client from kubeconfig, or from the default
// loading rules ($KUBECONFIG, then ~/.kube/config) when it is empty.
func newResourceAPI(kubeconfig string) (*resourceAPI, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return &resourceAPI{dyn: dyn}, nil
}

// claim reads the ResourceClaim namespace/name; a claim that does not
// exist is the API server's NotFound error.
func (a *resourceAPI) claim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	u, err := a.dyn.Resource(resourcev1.SchemeGroupVersion.WithResource("resourceclaims")).
		Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var c resourcev1.ResourceClaim
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &c); err != nil {
		return nil, fmt.Errorf("ResourceClaim %s/%s: %w", namespace, name, err)
	}
	return &c, nil
}

// slices lists one page of ResourceSlices.
func (a *resourceAPI) slices(ctx context.Context, opts metav1.ListOptions) (*resourcev1.ResourceSliceList, error) {
	ul, err := a.dyn.Resource(resourcev1.SchemeGroupVersion.WithResource("resourceslices")).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	list := &resourcev1.ResourceSliceList{Items: make([]resourcev1.ResourceSlice, len(ul.Items))}
	list.Continue = ul.GetContinue()
	for i := range ul.Items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ul.Items[i].UnstructuredContent(), &list.Items[i]); err != nil {
			return nil, fmt.Errorf("ResourceSlice %s: %w", ul.Items[i].GetName(), err)
		}
	}
	return list, nil
}
