package claimstatus_test

import (
	"context"
	"log"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dranode/dranode/sliceclient/claimstatus"
)

// A driver's NodePrepareResources publishes a Ready condition and its
// device's UUID after preparing, and NodeUnprepareResources removes them.
func Example() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatal(err)
	}
	w, err := claimstatus.New(claimstatus.Options{REST: clientset.ResourceV1().RESTClient(), DriverName: "gpu.example.com"})
	if err != nil {
		log.Fatal(err)
	}
	// The claim the kubelet asked to prepare.
	ref := claimstatus.Claim{Namespace: "default", Name: "gpu-claim", UID: "6c0b5a4e-0d3f-4b8e-9a51-3c2f1d7e8a90"}
	ctx := context.Background()
	err = w.Apply(ctx, ref, []resourcev1.AllocatedDeviceStatus{{
		Pool: "node-1", Device: "gpu-0",
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared", LastTransitionTime: metav1.Now()}},
		Data:       &runtime.RawExtension{Raw: []byte(`{"uuid":"GPU-0a1b"}`)},
	}})
	if err != nil {
		// The status is informational: report it, do not fail the prepare.
		log.Printf("device status not written (%s): %v", claimstatus.Reason(err), err)
	}
	// ... and on unprepare:
	if err := w.Clear(ctx, ref); err != nil {
		log.Printf("device status not removed (%s): %v", claimstatus.Reason(err), err)
	}
}
