package envtest

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func TestRestartAPIServerKeepsStateAndClients(t *testing.T) {
	env := &Environment{Audit: true}
	if err := env.RestartAPIServer(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("RestartAPIServer before Start = %v, want ErrNotRunning", err)
	}
	cfg := StartT(t, env)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Namespaces: cluster-scoped, so nothing has to exist first.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "before"}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := env.PIDs()[APIServerBinary]
	if err := env.RestartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if after := env.PIDs()[APIServerBinary]; after == before || !alive(after) || alive(before) {
		t.Fatalf("kube-apiserver pid %d before, %d after (alive: %v, %v); want a new process, the old one gone", before, after, alive(before), alive(after))
	}
	// The same client, unchanged: same address, certificates and token.
	if _, err := client.CoreV1().Namespaces().Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Fatalf("object written before the restart: %v", err)
	}
	// The restarted apiserver appends to the same audit log.
	ns.Name = "after"
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	events, err := env.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ev := range events {
		if ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "namespaces" && ev.Stage == "ResponseComplete" {
			seen[ev.ObjectRef.Name] = true
		}
	}
	if !seen["before"] || !seen["after"] {
		t.Fatalf("audit log has the creates of %v, want before and after", seen)
	}
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := env.RestartAPIServer(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("RestartAPIServer after Stop = %v, want ErrNotRunning", err)
	}
}
