package node_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"golang.org/x/sys/unix"

	"github.com/dranode/dranode/scripts/image/workload"
	"github.com/dranode/dranode/tools/envtest/hostlock"
)

const (
	loopDriver        = "loop.example.com"
	loopClaimTemplate = "loop-claim-template.yaml"
	loopPodSample     = "loop-pod.yaml"
	loopDiskGlob      = "/dev/" + loopDriver + "/disk-*"
)

// Issue 23: a real device end to end. The chart with its values for the
// loop driver (values-loop.yaml) runs loop-plugin in the agent's pod; one
// disk, so every claim gets the same one. A pod with a claim writes a
// pattern to its block device and reads it back; a pod without the claim
// that mounts the same host device node at the same path cannot open it
// (the device cgroup refuses it: proof the CDI spec's device rule is
// applied, which /dev/null, in every container's default rules, could not
// show); the next pod to claim the disk reads zeros.
func TestLoopDiskEndToEnd(t *testing.T) {
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("needs the loop driver: %v", err)
	}
	hostlock.HoldT(t) // the host's loop devices and the node's paths
	var stateDir string
	// Registered before the node: runs after it stopped, when the plugin
	// can attach nothing more.
	t.Cleanup(func() {
		if stateDir != "" {
			detachLoopDisks(t, stateDir)
		}
	})
	c := startClusterFiles(t, []string{"values-loop.yaml"}, func(c *cluster) map[string]any {
		stateDir = filepath.Join(c.node.Dir(), "dranode", "loop")
		return map[string]any{"drivers": map[string]any{
			"gpu": map[string]any{"sha256": testImages.pluginSHA256["gpu"]},
			"loop": map[string]any{"sha256": testImages.pluginSHA256["loop"], "config": map[string]any{
				"stateDir": stateDir, "numDevices": 1, "size": "4Mi",
			}},
		}}
	}, true)

	// The disk is published, healthy (no taint).
	var lastSlices string
	eventually(c, "a slice of "+loopDriver+" with disk-0", func() (struct{}, bool) {
		list, err := c.client.ResourceV1().ResourceSlices().List(c.ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + loopDriver})
		if err != nil {
			lastSlices = err.Error()
			return struct{}{}, false
		}
		lastSlices = fmt.Sprintf("%+v", list.Items)
		for _, s := range list.Items {
			for _, d := range s.Spec.Devices {
				if d.Name == "disk-0" && len(d.Taints) == 0 {
					return struct{}{}, true
				}
			}
		}
		return struct{}{}, false
	}, func() string { return lastSlices })
	c.applySample(loopClaimTemplate)

	pattern := "dranode issue 23 " + rand.Text()
	t.Logf("pattern %q", pattern)
	p1 := c.workloadPod("loop-writer", loopPodSample)
	probe(p1, loopDiskGlob, pattern)
	c.createPod(p1)
	p1 = c.waitRunning("default", p1.Name)
	claim1 := c.claimOf(p1)
	_, spec := c.specFor(claim1)
	r1 := c.report(p1.Namespace, p1.Name)
	checkContainerSawSpec(t, r1, spec)
	if len(spec.Devices) != 1 || len(spec.Devices[0].ContainerEdits.DeviceNodes) != 1 {
		t.Fatalf("CDI spec: %+v, want one device with one node", spec)
	}
	node := spec.Devices[0].ContainerEdits.DeviceNodes[0]
	if node.Type != "b" || node.Major != 7 || node.Permissions != "rw" || !strings.HasPrefix(node.HostPath, "/dev/loop") {
		t.Errorf("CDI device node %+v, want a read-write block device 7:N at /dev/loopN", node)
	}
	if b := r1.Block; b == nil || b.OpenError != "" || b.Error != "" || !b.ZerosBefore || b.ReadBack != pattern {
		t.Fatalf("the claim's pod: block probe %+v, want a fresh disk that reads back %q", b, pattern)
	}
	file := filepath.Join(stateDir, "disk-0.img")
	if onDisk := readPrefix(t, file, len(pattern)); string(onDisk) != pattern {
		t.Errorf("the backing file %s starts with %q, want the pod's pattern", file, onDisk)
	}

	// Another pod names the same device, without the claim.
	intruder, err := samplePod("loop-intruder", "")
	if err != nil {
		t.Fatal(err)
	}
	blockDev := corev1.HostPathBlockDev
	intruder.Spec.Volumes = []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: node.HostPath, Type: &blockDev}}}}
	intruder.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "disk", MountPath: node.Path}}
	probe(intruder, node.Path, "intruder")
	c.createPod(intruder)
	c.waitRunning("default", intruder.Name)
	ri := c.report(intruder.Namespace, intruder.Name)
	if b := ri.Block; b == nil || !strings.Contains(b.OpenError, "operation not permitted") {
		t.Errorf("the pod without the claim: block probe %+v, want its open refused with EPERM by the device cgroup", b)
	}
	if dev, ok := ri.Device(node.Path); !ok || dev.Type != workload.BlockDevice || int64(dev.Major) != node.Major || int64(dev.Minor) != node.Minor {
		t.Errorf("the pod without the claim does not have the node %s as b %d:%d (%+v): the refusal would prove nothing", node.Path, node.Major, node.Minor, dev)
	}
	if onDisk := readPrefix(t, file, len(pattern)); string(onDisk) != pattern {
		t.Errorf("after the pod without the claim, the disk starts with %q", onDisk)
	}

	c.endPods("the writer's claim unprepared", p1, intruder)
	if onDisk := readPrefix(t, file, 1<<20); !allZero(onDisk) {
		t.Errorf("after unprepare the backing file's first MiB is not zero")
	}
	if got := c.metric(fmt.Sprintf("dranode_unprepare_errors_total{driver=%q}", loopDriver)); got != 0 {
		t.Errorf("%v unprepare errors", got)
	}

	p2 := c.workloadPod("loop-reader", loopPodSample)
	probe(p2, loopDiskGlob, "")
	c.createPod(p2)
	p2 = c.waitRunning("default", p2.Name)
	claim2 := c.claimOf(p2)
	if d1, d2 := claim1.Status.Allocation.Devices.Results[0].Device, claim2.Status.Allocation.Devices.Results[0].Device; d1 != d2 {
		t.Fatalf("the second claim got %s, the first %s; the chart was given one disk", d2, d1)
	}
	if b := c.report(p2.Namespace, p2.Name).Block; b == nil || b.OpenError != "" || !b.ZerosBefore {
		t.Errorf("the next claim's pod: block probe %+v, want zeros", b)
	}
	c.endPods("the reader's claim unprepared", p2)
}

// probe asks the workload in p's first container for a block probe.
func probe(p *corev1.Pod, device, pattern string) {
	p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env,
		corev1.EnvVar{Name: workload.BlockEnv, Value: device},
		corev1.EnvVar{Name: workload.BlockPatternEnv, Value: pattern})
}

func readPrefix(t *testing.T, file string, n int) []byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return b
}

func allZero(b []byte) bool { return len(b) > 0 && bytes.Count(b, []byte{0}) == len(b) }

// loopTag is examples/loop/loopdev.Tag: the name loop-plugin gives the
// loop device of a backing file. It finds the plugin's devices after its
// container is gone, when sysfs no longer shows their files' paths.
func loopTag(file string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(file)))
	return "dranode:" + hex.EncodeToString(sum[:16])
}

// detachLoopDisks detaches every loop device loop-plugin attached for a
// disk of stateDir, and no other.
func detachLoopDisks(t *testing.T, stateDir string) {
	t.Helper()
	tags := map[string]bool{}
	for i := range 64 {
		tags[loopTag(filepath.Join(stateDir, "disk-"+strconv.Itoa(i)+".img"))] = true
	}
	entries, err := os.ReadDir("/sys/block")
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join("/sys/block", e.Name(), "loop")); err != nil || !strings.HasPrefix(e.Name(), "loop") {
			continue
		}
		f, err := os.OpenFile(filepath.Join("/dev", e.Name()), os.O_RDWR, 0)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			continue
		}
		info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
		if err == nil && tags[string(bytes.TrimRight(info.File_name[:], "\x00"))] {
			if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil {
				t.Errorf("cleanup: detaching /dev/%s: %v", e.Name(), err)
			} else {
				t.Logf("cleanup: detached /dev/%s", e.Name())
			}
		}
		f.Close()
	}
}
