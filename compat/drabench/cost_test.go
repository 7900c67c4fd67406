package drabench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/dranode/dranode/tools/envtest"
)

// discardLogger keeps the kubelet code's logs out of the output (klog
// writes them unprefixed, breaking benchstat's parsing) unless -v.
func discardLogger() logr.Logger {
	if testing.Verbose() {
		return klog.Background()
	}
	return logr.Discard()
}

// auditMark is how many audit events were logged so far.
func auditMark(t testing.TB) int {
	t.Helper()
	events, err := cluster.Env.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	return len(events)
}

// requests counts the completed requests logged since mark whose user
// agent starts with userAgent, by "verb resource" (subresource after a
// slash); namespace, when set, keeps only requests on objects there.
func requests(t testing.TB, mark int, userAgent, namespace string) map[string]int {
	t.Helper()
	events, err := cluster.Env.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, ev := range events[mark:] {
		if ev.Stage != "ResponseComplete" || !strings.HasPrefix(ev.UserAgent, userAgent) || ev.ObjectRef == nil {
			continue
		}
		if namespace != "" && ev.ObjectRef.Namespace != namespace {
			continue
		}
		res := ev.ObjectRef.Resource
		if sub := subresource(ev); sub != "" {
			res += "/" + sub
		}
		out[ev.Verb+" "+res]++
	}
	return out
}

func subresource(ev envtest.AuditEvent) string {
	// The trimmed event type has no subresource field: read it off the URI
	// (.../resourceclaims/<name>/status?...).
	path, _, _ := strings.Cut(ev.RequestURI, "?")
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if p == ev.ObjectRef.Resource && i+2 < len(parts) {
			return parts[i+2]
		}
	}
	return ""
}

func format(counts map[string]int, claims int) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(&b, " %s=%.2f", k, float64(counts[k])/float64(claims))
	}
	if b.Len() == 0 {
		return " none"
	}
	return b.String()
}

// claimBudget is what dranode-agent may ask of the API server per claim
// lifecycle (prepare, unprepare, the claim deallocated and deleted), by
// "verb resource": one quorum GET of the claim on its prepare, one
// server-side apply of its device status, nothing on unprepare, and
// nothing else. A change that adds a request fails the test; one that
// removes one should lower the budget.
var claimBudget = map[string]int{
	"get resourceclaims":          1,
	"patch resourceclaims/status": 1,
}

// TestRequestsPerClaim counts, in the API server's audit log, the
// requests dranode-agent makes for a claim's whole lifecycle through the
// kubelet's DRA manager, and holds them to claimBudget; the kubelet's own
// requests and the upstream helper's driver are logged beside them for
// comparison.
func TestRequestsPerClaim(t *testing.T) {
	const pods = 8
	agent := newDriverNode(t, kindAgent)
	upstream := newDriverNode(t, kindUpstream)
	for _, n := range []*driverNode{agent, upstream} {
		ps := n.schedule(pods)
		mark := auditMark(t)
		if _, _, err := each(ps, 4, n.prepare); err != nil {
			t.Fatal(err)
		}
		if n == agent {
			// Every status write goes out before the unprepare, so the
			// count is the whole lifecycle's, not a race with it.
			waitStatusWrites(t, n, pods)
		}
		if _, _, err := each(ps, 4, n.unprepare); err != nil {
			t.Fatal(err)
		}
		n.remove(ps)
		driverUA := map[string]string{kindAgent: "dranode-agent/" + n.name, kindUpstream: "piecemeal-driver"}[n.kind]
		got := requests(t, mark, driverUA, "")
		kubelet := requests(t, mark, kubeletUserAgent, n.name)
		t.Logf("%s: requests per claim by the driver:%s; by the kubelet:%s", n.kind, format(got, pods), format(kubelet, pods))
		if n != agent {
			continue
		}
		for k, v := range got {
			if v > claimBudget[k]*pods {
				t.Errorf("dranode-agent made %d %q requests for %d claims, budget %d per claim", v, k, pods, claimBudget[k])
			}
		}
	}
}

// waitStatusWrites waits until the agent's status writes accepted and
// refused add up to want.
func waitStatusWrites(t testing.TB, n *driverNode, want int) {
	t.Helper()
	n.poll("device status writes", func(ctx context.Context) (bool, error) {
		families, err := n.agent.Metrics(ctx)
		if err != nil {
			return false, err
		}
		got := 0.0
		for _, name := range []string{"dranode_claim_status_writes_total", "dranode_claim_status_write_errors_total"} {
			if f := families[name]; f != nil {
				for _, m := range f.Metric {
					got += m.GetCounter().GetValue()
				}
			}
		}
		if int(got) < want {
			return false, fmt.Errorf("%v of %d written", got, want)
		}
		return true, nil
	})
}
