package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// The gpu plugin with a shared and a partitioned GPU, end to end through a
// standalone agent: the slices carry allowMultipleAllocations, the counter
// set and what each device consumes; a claim with two shares of the shared
// GPU and a partition is prepared with a CDI device per share, and each
// share's edits are its own.
func TestSharedAndPartitionedGPUs(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	e.cfg.Plugins.Drivers[0].Config["sharedGPUs"] = 1
	e.cfg.Plugins.Drivers[0].Config["partitionedGPUs"] = 1
	e.start(t, Options{})

	// The standalone agent writes its slices when the plugin's first
	// inventory arrives, which may be after Start returns.
	var counterSets []string
	var consumes map[string]string
	var shared bool
	published := func() bool {
		counterSets, consumes, shared = nil, map[string]string{}, false
		for _, s := range dryRunSlices(t, e.cfg.Slices.DryRunDir) {
			for _, cs := range s.Spec.SharedCounters {
				counterSets = append(counterSets, cs.Name)
			}
			for _, d := range s.Spec.Devices {
				if d.Name == "shared-gpu-0" && d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations {
					shared = true
				}
				for _, c := range d.ConsumesCounters {
					consumes[d.Name] = c.CounterSet
				}
			}
		}
		return shared && slices.Equal(counterSets, []string{"partitioned-gpu-0"}) && len(consumes) == 3 && consumes["partitioned-gpu-0-part-1"] == "partitioned-gpu-0"
	}
	waitFor(t, "shared-gpu-0 with allowMultipleAllocations, and partitioned-gpu-0's counter set and its three consumers, in the slices", published)

	c := claim("default", "shapes", "00000000-0000-0000-0006-000000000000", "node-a",
		[2]string{gpuDriver, "shared-gpu-0"}, [2]string{gpuDriver, "shared-gpu-0"}, [2]string{gpuDriver, "partitioned-gpu-0-part-1"})
	results := c.Status.Allocation.Devices.Results
	share1, share2 := types.UID("aaaaaaaa-0000-0000-0000-00000000000a"), types.UID("aaaaaaaa-0000-0000-0000-00000000000b")
	results[0].ShareID, results[1].ShareID = &share1, &share2
	results[1].Request, results[2].Request = "req2", "req3"
	e.writeClaim(t, c)
	r := connectKubelet(t, e.cfg, gpuDriver).prepare(t, c)[string(c.UID)]
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	spec := readSpec(t, specPath(e.cfg, gpuDriver, string(c.UID)))
	env := map[string][]string{}
	for _, d := range spec.Devices {
		env[d.Name] = d.ContainerEdits.Env
	}
	for _, share := range []types.UID{share1, share2} {
		name := string(c.UID) + "-shared-gpu-0-" + string(share)
		if len(env[name]) != 2 {
			t.Errorf("CDI device %s: env %v, want the GPU's and its share's variables", name, env[name])
		}
	}
	if e1, e2 := env[string(c.UID)+"-shared-gpu-0-"+string(share1)], env[string(c.UID)+"-shared-gpu-0-"+string(share2)]; len(e1) == 2 && len(e2) == 2 && e1[1] == e2[1] {
		t.Errorf("two shares got the same share variable %s", e1[1])
	}
	if _, ok := env[string(c.UID)+"-partitioned-gpu-0-part-1"]; !ok || len(spec.Devices) != 3 {
		t.Errorf("spec devices %v, want two shares and the partition", env)
	}
}

// dryRunSlices reads the standalone agent's slices.
func dryRunSlices(t *testing.T, dir string) []resourcev1.ResourceSlice {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []resourcev1.ResourceSlice
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s resourcev1.ResourceSlice
		if err := yaml.UnmarshalStrict(data, &s); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, s)
	}
	return out
}

// A partitioned GPU is one piece of hardware under three device names:
// its two partitions are prepared side by side for two claims, the whole
// GPU is refused while either is held (the counters they consume would
// exceed the GPU's memory: a force-deleted pod's claim is still prepared
// when the scheduler, which sees it deallocated, hands the GPU on), and
// once the partitions' claims are unprepared, the kubelet's retry
// prepares it; then a partition waits for the whole.
func TestPartitionsOfOneGPU(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	e.cfg.Plugins.Drivers[0].Config["partitionedGPUs"] = 1
	a := e.start(t, Options{})
	part0 := claim("team-a", "part-0", "00000000-0000-0000-0041-000000000041", "node-a", [2]string{gpuDriver, "partitioned-gpu-0-part-0"})
	part1 := claim("team-b", "part-1", "00000000-0000-0000-0041-000000000042", "node-a", [2]string{gpuDriver, "partitioned-gpu-0-part-1"})
	whole := claim("team-c", "whole", "00000000-0000-0000-0041-000000000043", "node-a", [2]string{gpuDriver, "partitioned-gpu-0"})
	for _, c := range []*resourcev1.ResourceClaim{part0, part1, whole} {
		c.Status.Allocation.Devices.Results[0].Pool = "node-a" // the gpu plugin's pool is its node
		e.writeClaim(t, c)
	}
	k := connectKubelet(t, e.cfg, gpuDriver)
	waitFor(t, "the plugin's inventory", func() bool { return a.published(gpuDriver, "node-a", "partitioned-gpu-0").Listed })

	mustPrepared(t, k.prepare(t, part0), part0)
	mustPrepared(t, k.prepare(t, part1), part1)
	refused := func(c, holder *resourcev1.ResourceClaim, device, holderDevice string) {
		t.Helper()
		r := k.prepare(t, c)[string(c.UID)]
		want := fmt.Sprintf("device %s/node-a/%s (with device %s it exceeds counter memory of counter set partitioned-gpu-0) is in use by claim %s/%s (uid %s, prepared)",
			gpuDriver, device, holderDevice, holder.Namespace, holder.Name, holder.UID)
		if r == nil || !strings.Contains(r.Error, want) {
			t.Fatalf("prepare of %s beside %s: %v\nwant an error saying %q", device, holderDevice, r, want)
		}
	}
	refused(whole, part0, "partitioned-gpu-0", "partitioned-gpu-0-part-0")
	if r := k.unprepare(t, part0)[string(part0.UID)]; r.Error != "" {
		t.Fatal(r.Error)
	}
	refused(whole, part1, "partitioned-gpu-0", "partitioned-gpu-0-part-1")
	if r := k.unprepare(t, part1)[string(part1.UID)]; r.Error != "" {
		t.Fatal(r.Error)
	}
	mustPrepared(t, k.prepare(t, whole), whole)
	refused(part1, whole, "partitioned-gpu-0-part-1", "partitioned-gpu-0")
}
