package node_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// BenchmarkPodStartup measures create → Running of pods with a claim (the
// sample template's one GPU) against pods without, created interleaved in
// one run on the same node, 20 of each per iteration:
//
//	go test -run '^$' -bench PodStartup -benchtime 5x .
//
// Running is when a watch on the API server sees the pod's phase change:
// the same observer for both kinds, so the difference is what the claim
// adds (scheduling with DRA, the kubelet's Prepare call, CDI injection).
func BenchmarkPodStartup(b *testing.B) {
	const perKind = 20
	c := startCluster(b, gpus(perKind))
	c.applySample(claimTemplateSample)
	for _, mode := range []struct {
		name     string
		together bool
	}{{"together", true}, {"one-at-a-time", false}} {
		b.Run(mode.name, func(b *testing.B) {
			var all []podTimes
			for i := 0; b.Loop(); i++ {
				all = append(all, c.startPods(b, mode.name, i, perKind, mode.together)...)
				b.StopTimer()
				c.deleteAllPods(b)
				b.StartTimer()
			}
			pick := func(claim bool, f func(podTimes) time.Duration) []time.Duration {
				var ds []time.Duration
				for _, t := range all {
					if t.claim == claim {
						ds = append(ds, f(t))
					}
				}
				return ds
			}
			running := func(t podTimes) time.Duration { return t.running }
			bound := func(t podTimes) time.Duration { return t.scheduled }
			onNode := func(t podTimes) time.Duration { return t.running - t.scheduled }
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			with, without := pick(true, running), pick(false, running)
			p50w, p50o := percentile(with, 50), percentile(without, 50)
			b.ReportMetric(ms(p50w), "claim-p50-ms")
			b.ReportMetric(ms(percentile(with, 99)), "claim-p99-ms")
			b.ReportMetric(ms(p50o), "plain-p50-ms")
			b.ReportMetric(ms(percentile(without, 99)), "plain-p99-ms")
			b.ReportMetric(100*(p50w.Seconds()/p50o.Seconds()-1), "claim-adds-%-p50")
			b.Logf("%d pods of each kind, create → Running: with a claim p50 %s p99 %s; without p50 %s p99 %s",
				len(with), p50w, percentile(with, 99), p50o, percentile(without, 99))
			if m, err := c.metrics(); err == nil {
				sum, n := m[fmt.Sprintf("dranode_prepare_duration_seconds_sum{driver=%q}", driverName)], m[fmt.Sprintf("dranode_prepare_duration_seconds_count{driver=%q}", driverName)]
				if n > 0 {
					b.ReportMetric(sum/n*1000, "agent-prepare-mean-ms")
					b.Logf("  the agent's Prepare (kubelet call in, answer out): mean %.1f ms over %v calls (all runs so far)", sum/n*1000, n)
				}
			}
			b.Logf("  create → bound (control plane): with a claim p50 %s, without %s; bound → Running (node): with %s, without %s",
				percentile(pick(true, bound), 50), percentile(pick(false, bound), 50), percentile(pick(true, onNode), 50), percentile(pick(false, onNode), 50))
		})
	}
}

// podTimes is one pod's start-up as a watch on the API server saw it.
type podTimes struct {
	claim     bool
	scheduled time.Duration // Create call → bound to the node (the control plane's part)
	running   time.Duration // Create call → Running
}

// startPods creates n pods of each kind, interleaved — all at once, or each
// after the one before runs — and returns each pod's times.
func (c *cluster) startPods(b *testing.B, mode string, iter, n int, together bool) []podTimes {
	w, err := c.client.CoreV1().Pods("default").Watch(c.ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	created := map[string]time.Time{}
	scheduled := map[string]time.Duration{}
	var times []podTimes
	var wg sync.WaitGroup
	waitFor := func(count int) {
		for len(times) < count {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					b.Fatal("watch ended")
				}
				p, isPod := ev.Object.(*corev1.Pod)
				if !isPod || ev.Type == watch.Deleted {
					continue
				}
				now := time.Now()
				mu.Lock()
				start, ok := created[p.Name]
				mu.Unlock()
				if !ok {
					continue
				}
				if _, seen := scheduled[p.Name]; !seen && p.Spec.NodeName != "" {
					scheduled[p.Name] = now.Sub(start)
				}
				if p.Status.Phase != corev1.PodRunning || scheduled[p.Name] < 0 {
					continue
				}
				times = append(times, podTimes{claim: p.Spec.ResourceClaims != nil, scheduled: scheduled[p.Name], running: now.Sub(start)})
				scheduled[p.Name] = -1 // counted
			case <-c.ctx.Done():
				b.Fatalf("%d of %d pods Running", len(times), count)
			}
		}
	}
	for i := range 2 * n {
		sample, name := podSample, fmt.Sprintf("claim-%s-%d-%02d", mode, iter, i)
		if i%2 == 1 {
			sample, name = "", fmt.Sprintf("plain-%s-%d-%02d", mode, iter, i)
		}
		p := c.workloadPod(name, sample)
		wg.Go(func() {
			mu.Lock()
			created[name] = time.Now()
			mu.Unlock()
			if _, err := c.client.CoreV1().Pods("default").Create(c.ctx, p, metav1.CreateOptions{}); err != nil {
				b.Error(err)
			}
		})
		if !together {
			wg.Wait()
			waitFor(i + 1)
		}
	}
	wg.Wait()
	waitFor(2 * n)
	return times
}

func (c *cluster) deleteAllPods(b *testing.B) {
	pods, err := c.client.CoreV1().Pods("default").List(c.ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range pods.Items {
		c.deletePod("default", p.Name)
	}
	for _, p := range pods.Items {
		c.waitPodGone("default", p.Name)
	}
	c.waitNoSpecs("every claim unprepared")
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return s[i-1]
}
