package envtest_test

import (
	"context"
	"fmt"
	"log"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dranode/dranode/tools/envtest"
)

// Start a control plane with a scheduler and list the ResourceSlices it
// serves. (No "Output:" comment: it needs the control-plane binaries, so
// go test compiles it without running it; the package tests prove the
// behaviour.)
func ExampleEnvironment() {
	env := &envtest.Environment{Scheduler: true}
	cfg, err := env.Start()
	if err != nil {
		log.Fatal(err) // names the directory it looked in and "make controlplane"
	}
	defer env.Stop()

	client := kubernetes.NewForConfigOrDie(cfg)
	slices, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(slices.Items), "slices")
}
