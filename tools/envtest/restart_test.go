package envtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
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

	// Extra flags stay for the restarts after; a dry run is logged as one.
	if err := env.RestartAPIServer("--feature-gates=DRADeviceTaints=false,DRADeviceTaintRules=false"); err != nil {
		t.Fatal(err)
	}
	if err := env.RestartAPIServer(); err != nil {
		t.Fatal(err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", env.PIDs()[APIServerBinary]))
	if err != nil || !bytes.Contains(cmdline, []byte("\x00--feature-gates=DRADeviceTaints=false,DRADeviceTaintRules=false")) {
		t.Errorf("kube-apiserver's command line after two restarts, the first with an extra flag: %q (%v)", cmdline, err)
	}
	ns.Name = "dry"
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if events, err = env.AuditEvents(); err != nil {
		t.Fatal(err)
	}
	dry := map[string]bool{}
	for _, ev := range events {
		if ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "namespaces" && ev.Stage == "ResponseComplete" {
			dry[ev.ObjectRef.Name] = ev.DryRun()
		}
	}
	if _, logged := dry["dry"]; !logged || !dry["dry"] || dry["before"] || dry["after"] {
		t.Errorf("namespace creates by DryRun(): %v, want dry true, before and after false", dry)
	}

	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := env.RestartAPIServer(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("RestartAPIServer after Stop = %v, want ErrNotRunning", err)
	}
}
