package sliceclient

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// Client is the API access a Publisher and a Watcher need. Its fields have
// the method sets of client-go's typed clients, so a clientset fills it:
//
//	sliceclient.Client{ResourceSlices: cs.ResourceV1().ResourceSlices(), Nodes: cs.CoreV1().Nodes()}
//
// The package imports no typed client itself: a typed client-go package
// registers every API group's types when a binary starts, which a node
// component with a client for two groups should not have to pay for (see
// the README).
type Client struct {
	// ResourceSlices reads and writes the driver's slices. Required.
	ResourceSlices ResourceSliceClient
	// Nodes reads the Node that owns the slices, once at Start, when
	// Options.NodeUID is empty; it may be nil otherwise.
	Nodes NodeGetter
}

// ResourceSliceClient is the part of client-go's
// resourcev1.ResourceSliceInterface that sliceclient calls; implementations
// must be safe for concurrent use and return the API server's errors
// unwrapped (apierrors.IsNotFound and IsConflict must see them).
type ResourceSliceClient interface {
	Create(ctx context.Context, slice *resourceapi.ResourceSlice, opts metav1.CreateOptions) (*resourceapi.ResourceSlice, error)
	Update(ctx context.Context, slice *resourceapi.ResourceSlice, opts metav1.UpdateOptions) (*resourceapi.ResourceSlice, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*resourceapi.ResourceSlice, error)
	List(ctx context.Context, opts metav1.ListOptions) (*resourceapi.ResourceSliceList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// NodeGetter reads one Node, as client-go's corev1.NodeInterface does.
type NodeGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
}
