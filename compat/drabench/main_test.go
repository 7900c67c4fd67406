package drabench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dranode/dranode/compat/e2e/harness"
	"github.com/dranode/dranode/pluginmgr/plugintest"
	"github.com/dranode/dranode/tools/envtest"
)

// Shared by every test and benchmark: one control plane (a node and a
// namespace per driver) and one build of each driver.
var (
	cluster      *harness.Cluster
	clusterError error
	bins         harness.Binaries
	upstreamBin  string
	buildError   error
)

// auditPolicy logs every request on resource.k8s.io objects, reads
// included, so that the requests a driver makes per claim can be counted
// by verb; nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  resources:
  - group: resource.k8s.io
- level: None
`

func TestMain(m *testing.M) {
	// The same binary is the null driver's process (see nulldriver_test.go).
	if os.Getenv(nullDriverEnv) != "" {
		os.Exit(runNullDriver())
	}
	// And the example driver's (exampledriver_test.go).
	if os.Getenv(exampleDriverEnv) != "" {
		os.Exit(runExampleDriver())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	binDir, err := os.MkdirTemp("", "drabench-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(binDir)
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Setup failures fail every test with their reason.
	bins, buildError = harness.BuildBinaries(root, binDir)
	if buildError == nil {
		upstreamBin = filepath.Join(binDir, "piecemeal-driver")
		_, buildError = plugintest.Build(context.Background(), filepath.Join(root, "examples/piecemeal-driver"), "./cmd/piecemeal-driver", upstreamBin)
	}
	cluster, clusterError = startCluster()
	if cluster != nil {
		defer cluster.Stop()
	}
	return m.Run()
}

// startCluster is harness.StartCluster with an audit policy that logs
// reads too.
func startCluster() (*harness.Cluster, error) {
	env := &envtest.Environment{Scheduler: true, Audit: true, AuditPolicy: auditPolicy}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start control plane (build it with `make controlplane`): %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &harness.Cluster{Env: env, Config: cfg, Client: client, Kubeconfig: env.KubeconfigPath()}, nil
}

func setup(t testing.TB) {
	t.Helper()
	if clusterError != nil {
		t.Fatalf("drabench setup: %v", clusterError)
	}
	if buildError != nil {
		t.Fatalf("drabench setup: %v", buildError)
	}
}
