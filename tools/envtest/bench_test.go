package envtest

import "testing"

// BenchmarkStart measures Start (etcd + kube-apiserver until /readyz, and
// kube-scheduler until its /readyz for the "scheduler" case); Stop is
// outside the timed part.
func BenchmarkStart(b *testing.B) {
	for _, tc := range []struct {
		name      string
		scheduler bool
	}{{"apiserver", false}, {"scheduler", true}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				env := &Environment{Scheduler: tc.scheduler}
				if _, err := env.Start(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := env.Stop(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
