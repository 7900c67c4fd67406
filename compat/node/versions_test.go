package node_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/dranode/dranode/compat/node/harness"
	"github.com/dranode/dranode/tools/envtest"
)

// minors are the Kubernetes minors of the binaries the tests run: the
// control plane's ($DRANODE_CONTROLPLANE_BIN, else the build cache) and the
// kubelet's ($DRANODE_NODE_BIN, else the build cache). The version matrix
// (scripts/matrix.sh) runs every scenario with each supported minor's, and
// the newest API server with the oldest kubelet; a scenario that needs a
// feature some minor lacks, or has off by default, reads them here.
type minors struct{ apiServer, kubelet int }

func (m minors) String() string {
	if m.apiServer == m.kubelet {
		return fmt.Sprintf("Kubernetes 1.%d", m.apiServer)
	}
	return fmt.Sprintf("API server 1.%d, kubelet 1.%d", m.apiServer, m.kubelet)
}

// componentMinors reads the binaries' versions once per test binary.
var componentMinors = sync.OnceValues(func() (minors, error) {
	dir, _, err := envtest.DefaultBinaryDir()
	if err != nil {
		return minors{}, err
	}
	apiserver := filepath.Join(dir, "kube-apiserver")
	out, err := exec.Command(apiserver, "--version").Output()
	if err != nil {
		return minors{}, fmt.Errorf("%s --version: %w", apiserver, err)
	}
	api, err := minorOf(strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes "))
	if err != nil {
		return minors{}, fmt.Errorf("%s --version: %w", apiserver, err)
	}
	bins, err := harness.FindBinaries()
	if err != nil {
		return minors{}, err
	}
	kubelet, err := minorOf(bins.KubernetesVersion)
	if err != nil {
		return minors{}, fmt.Errorf("KUBERNETES_VERSION in %s/node.env: %w", bins.Dir, err)
	}
	return minors{apiServer: api, kubelet: kubelet}, nil
})

func testMinors(t testing.TB) minors {
	t.Helper()
	m, err := componentMinors()
	if err != nil {
		t.Fatalf("the Kubernetes versions of the binaries: %v", err)
	}
	return m
}

// minorOf is the minor of a version v1.<minor>.<patch>.
func minorOf(v string) (int, error) {
	rest, ok := strings.CutPrefix(v, "v1.")
	minor, _, _ := strings.Cut(rest, ".")
	n, err := strconv.Atoi(minor)
	if !ok || err != nil {
		return 0, fmt.Errorf("version %q is not v1.<minor>.<patch>", v)
	}
	return n, nil
}

// featureGate is a Kubernetes feature gate and the first minor that has
// it on by default.
type featureGate struct {
	name        string
	onByDefault int
}

// gatesOn are the feature gates a scenario turns on where a component's
// minor has them off by default, as an operator of that minor must to use
// the feature: the API server's --feature-gates flag (the scheduler and the
// controller manager keep their defaults) and the kubelet's featureGates.
type gatesOn struct {
	apiServer []string        // "--feature-gates=..." when any
	kubelet   map[string]bool // nil when none
	said      []string        // what was turned on where, for the log
}

func turnOn(m minors, gates ...featureGate) gatesOn {
	var g gatesOn
	var api []string
	for _, f := range gates {
		if m.apiServer < f.onByDefault {
			api = append(api, f.name+"=true")
			g.said = append(g.said, fmt.Sprintf("%s on the API server (1.%d)", f.name, m.apiServer))
		}
		if m.kubelet < f.onByDefault {
			if g.kubelet == nil {
				g.kubelet = map[string]bool{}
			}
			g.kubelet[f.name] = true
			g.said = append(g.said, fmt.Sprintf("%s on the kubelet (1.%d)", f.name, m.kubelet))
		}
	}
	if len(api) > 0 {
		g.apiServer = []string{"--feature-gates=" + strings.Join(api, ",")}
	}
	return g
}

func TestMinorOf(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"v1.34.4", 34, true},
		{"v1.37.2", 37, true},
		{"v1.36.0-rc.1", 36, true},
		{"1.34.4", 0, false},
		{"v2.1.0", 0, false},
		{"", 0, false},
	} {
		got, err := minorOf(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("minorOf(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestTurnOn(t *testing.T) {
	health := featureGate{"ResourceHealthStatus", 36}
	if g := turnOn(minors{37, 37}, health); g.apiServer != nil || g.kubelet != nil {
		t.Errorf("1.37: %+v, want nothing turned on", g)
	}
	g := turnOn(minors{37, 34}, health)
	if g.apiServer != nil || !g.kubelet["ResourceHealthStatus"] {
		t.Errorf("API 1.37, kubelet 1.34: %+v, want the kubelet's gate only", g)
	}
	g = turnOn(minors{35, 35}, health, featureGate{"DRADeviceTaints", 36})
	if want := "--feature-gates=ResourceHealthStatus=true,DRADeviceTaints=true"; len(g.apiServer) != 1 || g.apiServer[0] != want || len(g.kubelet) != 2 {
		t.Errorf("1.35: %+v, want %s and both on the kubelet", g, want)
	}
}
