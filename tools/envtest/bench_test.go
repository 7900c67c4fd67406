package envtest

import "testing"

// BenchmarkStart measures Start (etcd + kube-apiserver until /readyz,
// kube-scheduler until its /readyz for the "scheduler" case, and
// kube-controller-manager until its /healthz for "controllermanager"); Stop
// is outside the timed part.
func BenchmarkStart(b *testing.B) {
	for _, tc := range []struct {
		name           string
		scheduler, kcm bool
	}{{"apiserver", false, false}, {"scheduler", true, false}, {"controllermanager", false, true}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				env := &Environment{Scheduler: tc.scheduler, ControllerManager: tc.kcm}
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
