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
			var with, without []time.Duration
			for i := 0; b.Loop(); i++ {
				w, wo := c.startPods(b, mode.name, i, perKind, mode.together)
				with, without = append(with, w...), append(without, wo...)
				b.StopTimer()
				c.deleteAllPods(b)
				b.StartTimer()
			}
			p50w, p99w := percentile(with, 50), percentile(with, 99)
			p50o, p99o := percentile(without, 50), percentile(without, 99)
			b.ReportMetric(p50w.Seconds()*1000, "claim-p50-ms")
			b.ReportMetric(p99w.Seconds()*1000, "claim-p99-ms")
			b.ReportMetric(p50o.Seconds()*1000, "plain-p50-ms")
			b.ReportMetric(p99o.Seconds()*1000, "plain-p99-ms")
			b.ReportMetric(100*(p50w.Seconds()/p50o.Seconds()-1), "claim-adds-%-p50")
			b.Logf("%d pods of each kind: with a claim p50 %s p99 %s; without p50 %s p99 %s", len(with), p50w, p99w, p50o, p99o)
		})
	}
}

// startPods creates n pods of each kind, interleaved — all at once, or each
// after the one before runs — and returns each pod's time from its Create
// call to the watch seeing it Running.
func (c *cluster) startPods(b *testing.B, mode string, iter, n int, together bool) (with, without []time.Duration) {
	w, err := c.client.CoreV1().Pods("default").Watch(c.ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	created := map[string]time.Time{}
	var wg sync.WaitGroup
	running := map[string]bool{}
	waitFor := func(count int) {
		for len(running) < count {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					b.Fatal("watch ended")
				}
				p, isPod := ev.Object.(*corev1.Pod)
				if !isPod || ev.Type == watch.Deleted || p.Status.Phase != corev1.PodRunning || running[p.Name] {
					continue
				}
				now := time.Now()
				mu.Lock()
				start, ok := created[p.Name]
				mu.Unlock()
				if !ok {
					continue
				}
				running[p.Name] = true
				if p.Spec.ResourceClaims != nil {
					with = append(with, now.Sub(start))
				} else {
					without = append(without, now.Sub(start))
				}
			case <-c.ctx.Done():
				b.Fatalf("%d of %d pods Running", len(running), count)
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
	if together {
		wg.Wait()
	}
	waitFor(2 * n)
	wg.Wait()
	return with, without
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
