package e2e

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra/state"
)

// The kubelet's DRA manager writes its whole checkpoint (every claim it
// knows), with fsync, twice per pod it prepares: once when it adds the
// pod's claims and once when it marks them prepared, both under the one
// lock of its claim cache. Pods prepared at once therefore queue for those
// writes: 50 pods make 100 checkpoint writes one after the other, of up to
// 50 claims each. This benchmark runs exactly that sequence with the
// kubelet's own checkpointer (pkg/kubelet/cm/dra/state) on this disk: the
// floor under any DRA driver's 50-pod batch, whatever the driver does.
func BenchmarkKubeletCheckpointFloor(b *testing.B) {
	for _, pods := range []int{1, 50} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			cp, err := state.NewCheckpointer(b.TempDir(), "dra_manager_state")
			if err != nil {
				b.Fatal(err)
			}
			claims := make(state.ClaimInfoStateList, 0, pods)
			store := func() {
				c, err := state.NewCheckpoint(claims)
				if err != nil {
					b.Fatal(err)
				}
				if err := cp.Store(c); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				claims = claims[:0]
				// As with concurrent pod workers: every pod's first write
				// (claim added), then every pod's second (devices recorded).
				for i := range pods {
					uid := fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
					claims = append(claims, state.ClaimInfoState{
						ClaimUID: types.UID(uid), ClaimName: "pod-" + uid + "-gpu", Namespace: "bench",
						PodUIDs:     sets.New("pod-" + uid),
						DriverState: map[string]state.DriverState{gpuDriver: {}},
					})
					store()
				}
				for i := range claims {
					uid := string(claims[i].ClaimUID)
					claims[i].DriverState[gpuDriver] = state.DriverState{Devices: []state.Device{{
						PoolName: "pool", DeviceName: fmt.Sprintf("gpu-%d", i), RequestNames: []string{"gpu"},
						CDIDeviceIDs: []string{gpuDriver + "/claim=" + uid + "-gpu-" + fmt.Sprint(i)},
					}}}
					store()
				}
			}
		})
	}
}
