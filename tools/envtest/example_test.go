package envtest_test

import (
	"context"
	"fmt"
	"log"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// Start a control plane with kube-controller-manager (DefaultControllers)
// and wait for a new namespace's default ServiceAccount, which a pod in
// that namespace needs before admission takes it.
func ExampleEnvironment_controllerManager() {
	env := &envtest.Environment{Scheduler: true, ControllerManager: true}
	cfg, err := env.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer env.Stop()

	ctx := context.Background()
	client := kubernetes.NewForConfigOrDie(cfg)
	ns, err := client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "example-"}}, metav1.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for {
		_, err := client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsNotFound(err) {
			log.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Println("namespace", ns.Name, "has its default service account")
}
