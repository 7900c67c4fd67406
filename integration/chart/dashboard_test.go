package chart

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourcev1 "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"sigs.k8s.io/yaml"

	"github.com/dranode/dranode/pluginmgr/plugintest"
	"github.com/dranode/dranode/tools/envtest/hostlock"
)

// notScraped are dashboard series that a standalone agent after one good
// prepare and unprepare does not serve yet (a labelled series exists from
// its first event), each with the reason. They must still be defined by the
// agent (checked in its source); every other name a query uses must be in
// the real agent's /metrics. A name here that the scrape does hold is an
// error too, so the list cannot rot.
var notScraped = map[string]string{
	"dranode_slice_writes_total":        "written by the API server publisher (standalone writes slice files)",
	"dranode_claim_status_writes_total": "claim status is written to the API server only",
	"dranode_forwarded_calls_total":     "only an instance that handed its record over forwards",
	"dranode_prepare_errors_total":      "from the first failed prepare",
	"dranode_prepare_refused_total":     "from the first prepare refused (a device another claim holds)",
	"dranode_unprepare_errors_total":    "from the first failed unprepare",
	"dranode_record_leftover_claims":    "from the first sweep that reads the kubelet's checkpoint (there is none standalone)",
}

// TestDashboardQueriesNameRealMetrics starts the real dranode-agent
// standalone with the simulated GPU driver, as "make run" does, prepares
// and unprepares the example claim through its DRA socket as the kubelet
// would, scrapes /metrics and checks every metric name of every query of
// the chart's Grafana dashboard against what the agent serves.
func TestDashboardQueriesNameRealMetrics(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "dranode.json"))
	if err != nil {
		t.Fatal(err)
	}
	used := dashboardMetrics(t, raw)
	if len(used) == 0 {
		t.Fatal("the dashboard's queries name no dranode_ metric")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a := startStandaloneAgent(ctx, t)
	claim := exampleClaim(t)
	dra := drapbv1.NewDRAPluginClient(a.dial(t))
	ref := &drapbv1.Claim{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}
	pr, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{ref}})
	if err != nil || pr.Claims[string(claim.UID)].GetError() != "" {
		t.Fatalf("NodePrepareResources: %v %v", err, pr)
	}
	ur, err := dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{ref}})
	if err != nil || ur.Claims[string(claim.UID)].GetError() != "" {
		t.Fatalf("NodeUnprepareResources: %v %v", err, ur)
	}
	served := a.scrape(t)
	defined := agentSource(t)

	for _, name := range used {
		_, excused := notScraped[name]
		switch {
		case served[name] && excused:
			t.Errorf("%s is served standalone: remove it from notScraped", name)
		case !served[name] && !excused:
			t.Errorf("the dashboard queries %s, which the agent does not serve (agent/metrics.go and friends)", name)
		case excused && !strings.Contains(defined, `"`+name+`"`) && !strings.Contains(defined, `"`+strings.TrimPrefix(name, "dranode_")+`"`):
			t.Errorf("the dashboard queries %s, which the agent's source does not define", name)
		}
	}
	for name := range notScraped {
		if !slices.Contains(used, name) {
			t.Errorf("notScraped lists %s, which no query uses", name)
		}
	}
	t.Logf("%d metric names in the dashboard, %d served by the standalone agent", len(used), len(served))
}

// agentSource is the agent module's non-test Go source, where its metrics
// are named.
func agentSource(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob("../../agent/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(raw)
	}
	return b.String()
}

var metricName = regexp.MustCompile(`\bdranode_[a-z_]+`)

// dashboardMetrics returns the sorted metric names of every panel target
// and templating query.
func dashboardMetrics(t *testing.T, raw []byte) []string {
	t.Helper()
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Query any }
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	seen := map[string]bool{}
	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if s, ok := v.Query.(string); ok {
			exprs = append(exprs, s)
		}
	}
	for _, e := range exprs {
		for _, m := range metricName.FindAllString(e, -1) {
			seen[m] = true
		}
	}
	return slices.Sorted(func(yield func(string) bool) {
		for k := range seen {
			if !yield(k) {
				return
			}
		}
	})
}

type standaloneAgent struct {
	run, metricsURL string
}

// startStandaloneAgent builds dranode-agent and the GPU plugin, writes the
// configuration of "make run" (examples/config/standalone.yaml, with its
// placeholders filled as the Makefile fills them) and starts the agent,
// returning once it is ready.
func startStandaloneAgent(ctx context.Context, t *testing.T) *standaloneAgent {
	t.Helper()
	bin, run := t.TempDir(), t.TempDir()
	build := func(module, pkg, out string) string {
		p, err := plugintest.Build(ctx, filepath.Join("../..", module), pkg, filepath.Join(bin, out))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	agent := build("agent", "./cmd/dranode-agent", "dranode-agent")
	plugin := build("examples", "./gpu", "gpu-plugin")
	sum, err := exec.Command("sha256sum", plugin).Output()
	if err != nil {
		t.Fatal(err)
	}
	// make run also starts the loop example, which attaches real loop
	// devices of this machine when run as root: hold the host lock, and
	// detach its disks once the agent is gone (cleanups run last first).
	hostlock.HoldT(t)
	loop := build("examples", "./loop/cmd/loop-plugin", "loop-plugin")
	loopSum, err := exec.Command("sha256sum", loop).Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(loop, "detach", filepath.Join(run, "loop")).CombinedOutput(); err != nil {
			t.Errorf("detaching the loop example's disks: %v\n%s", err, out)
		}
	})
	claims, err := filepath.Abs("../../examples/config/claims")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile("../../examples/config/standalone.yaml")
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cfg := strings.NewReplacer("@RUN@", run, "@BIN@", bin, "@CLAIMS@", claims, "@GPU_SHA256@", strings.Fields(string(sum))[0],
		"@LOOP_SHA256@", strings.Fields(string(loopSum))[0],
		"127.0.0.1:8085", fmt.Sprintf("127.0.0.1:%d", port)).Replace(string(tmpl))
	if !strings.Contains(cfg, fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Fatal("examples/config/standalone.yaml no longer listens on 127.0.0.1:8085: update this test")
	}
	cfgFile := filepath.Join(run, "agent.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(agent, "--config", cfgFile)
	logFile, err := os.Create(filepath.Join(run, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		<-exited
		if t.Failed() {
			log, _ := os.ReadFile(logFile.Name())
			t.Logf("agent log:\n%s", log)
		}
	})
	a := &standaloneAgent{run: run, metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", port)}
	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, 500*time.Millisecond) {
		resp, err := http.Get(ready)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return a
			}
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the agent exited before it was ready: %v", err)
		case <-ctx.Done():
			t.Fatalf("the agent was not ready: %v (last: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
	}
}

func (a *standaloneAgent) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(a.run, "plugins", "gpu.example.com", "dra.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// scrape returns the names of the series the agent serves (a histogram's
// _bucket, _sum and _count as well as its base name).
func (a *standaloneAgent) scrape(t *testing.T) map[string]bool {
	t.Helper()
	resp, err := http.Get(a.metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# TYPE ") {
			names[strings.Fields(line)[2]] = true
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		names[name] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

func exampleClaim(t *testing.T) *resourcev1.ResourceClaim {
	t.Helper()
	raw, err := os.ReadFile("../../examples/config/claims/gpu-claim.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c resourcev1.ResourceClaim
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
