package node_test

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dranode/dranode/scripts/image/workload"
)

// The gpu example's partitioned GPU (partitionedGPUs: 1, two partitions)
// and the documented container path of a claim's metadata file
// (agent/README.md, "Device metadata").
const (
	partitionedGPU      = "partitioned-gpu-0"
	deviceAttributesDir = "/var/run/kubernetes.io/dra-device-attributes"
)

// deviceMetadata is the part of a KEP-5304 metadata file the checks read:
// its first JSON object (the file holds the same object once per API
// version, newest first).
type deviceMetadata struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
	} `json:"metadata"`
	Requests []struct {
		Name    string `json:"name"`
		Devices []struct {
			Driver     string                                                  `json:"driver"`
			Pool       string                                                  `json:"pool"`
			Name       string                                                  `json:"name"`
			Attributes map[resourcev1.QualifiedName]resourcev1.DeviceAttribute `json:"attributes"`
		} `json:"devices"`
	} `json:"requests"`
}

// Issue 41, partitionable devices (KEP-4815, beta and on by default in
// 1.36 and 1.37) and device metadata (KEP-5304): the agent publishes the
// partitioned GPU's counter set and the devices that consume it; the real
// scheduler allocates one partition to a claim whose CEL selector names
// it; the agent prepares it, and the pod's container gets the partition's
// CDI device and, with the chart's deviceMetadata on, reads its request's
// metadata file at the documented path with the partition's driver, pool,
// name and the attributes the slice publishes. Deleting pod and claim
// removes the spec and the file on the host.
func checkPartitionWithMetadata(t *testing.T, c *cluster) {
	t.Helper()
	start := time.Now()
	part, pool := c.partitionOf(partitionedGPU, 1)
	claim := c.claimOnDevice("default", "gpu-partition", resourcev1.DeviceRequestAllocationResult{Driver: driverName, Pool: pool, Device: part.Name})
	if _, err := c.client.ResourceV1().ResourceClaims(claim.Namespace).Create(c.ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating claim %s: %v", claim.Name, err)
	}
	p := c.claimPod(claim.Name, claim)
	p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: workload.FilesEnv, Value: deviceAttributesDir + "/*/*/*/*"})
	c.createPod(p)
	p = c.waitRunning(p.Namespace, p.Name)
	got, err := c.client.ResourceV1().ResourceClaims(claim.Namespace).Get(c.ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Allocation == nil || len(got.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s allocated %+v, want one device", got.Name, got.Status.Allocation)
	}
	if r := got.Status.Allocation.Devices.Results[0]; r.Device != part.Name || r.Pool != pool {
		t.Fatalf("claim %s got %s/%s, want the partition %s/%s", got.Name, r.Pool, r.Device, pool, part.Name)
	}
	name, spec := c.specFor(got)
	r := c.report(p.Namespace, p.Name)
	checkContainerSawSpec(t, r, spec)
	if !slices.ContainsFunc(r.Env, func(e workload.EnvVar) bool { return strings.HasSuffix(e.Name, "_PARTITIONED_0_PART_1") }) {
		t.Errorf("the partition's pod has no GPU_DEVICE_..._PARTITIONED_0_PART_1: %v", r.Env)
	}

	path := deviceAttributesDir + "/resourceclaims/" + claim.Name + "/gpu/" + driverName + "-metadata.json"
	if len(r.Files) != 1 {
		t.Errorf("the container sees %d files under %s, want its request's one: %+v", len(r.Files), deviceAttributesDir, r.Files)
	}
	f, ok := r.File(path)
	if !ok || f.Error != "" {
		t.Fatalf("the container read no metadata file at %s (%+v); it has %+v", path, f, r.Files)
	}
	var md deviceMetadata
	if err := json.NewDecoder(strings.NewReader(f.Content)).Decode(&md); err != nil {
		t.Fatalf("metadata file %s: %v\n%s", path, err, f.Content)
	}
	if md.Kind != "DeviceMetadata" || md.APIVersion != "metadata.resource.k8s.io/v1beta1" ||
		md.Metadata.Name != got.Name || md.Metadata.Namespace != got.Namespace || md.Metadata.UID != string(got.UID) {
		t.Errorf("metadata file %s is %s %s of %s/%s (UID %s), want DeviceMetadata metadata.resource.k8s.io/v1beta1 of %s/%s (UID %s)",
			path, md.Kind, md.APIVersion, md.Metadata.Namespace, md.Metadata.Name, md.Metadata.UID, got.Namespace, got.Name, got.UID)
	}
	if len(md.Requests) != 1 || md.Requests[0].Name != "gpu" || len(md.Requests[0].Devices) != 1 {
		t.Fatalf("metadata file %s: requests %+v, want request gpu with one device", path, md.Requests)
	}
	d := md.Requests[0].Devices[0]
	if d.Driver != driverName || d.Pool != pool || d.Name != part.Name {
		t.Errorf("metadata file %s names device %s/%s/%s, want %s/%s/%s", path, d.Driver, d.Pool, d.Name, driverName, pool, part.Name)
	}
	if v := d.Attributes["partition"].IntValue; v == nil || *v != 1 {
		t.Errorf("metadata file %s: attribute partition %v, want 1", path, v)
	}
	if !reflect.DeepEqual(d.Attributes, part.Attributes) {
		t.Errorf("metadata file %s: attributes %+v, the ResourceSlice publishes %+v", path, d.Attributes, part.Attributes)
	}
	t.Logf("pod %s: partition %s through %s, metadata %s", p.Name, part.Name, name, path)

	c.deletePod(p.Namespace, p.Name)
	c.waitPodGone(p.Namespace, p.Name)
	if err := c.client.ResourceV1().ResourceClaims(got.Namespace).Delete(c.ctx, got.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitSpecGone(got)
	hostDir := filepath.Join(c.node.KubeletRootDir(), "plugins", driverName, "dra-device-metadata", string(got.UID))
	if _, err := os.Stat(hostDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the claim's metadata directory %s is left after unprepare (%v)", hostDir, err)
	}
	t.Logf("a partition with its device metadata: %s", time.Since(start).Round(time.Second))
}

// partitionOf checks that the node's slices publish the counter set of the
// partitioned GPU gpu and the whole GPU and its partitions consuming it,
// and returns partition m and its pool.
func (c *cluster) partitionOf(gpu string, m int) (resourcev1.Device, string) {
	c.t.Helper()
	list, err := c.client.ResourceV1().ResourceSlices().List(c.ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driverName})
	if err != nil {
		c.t.Fatal(err)
	}
	var counters bool
	consumers := map[string]resourcev1.Device{}
	var pool string
	for _, s := range list.Items {
		for _, set := range s.Spec.SharedCounters {
			if _, ok := set.Counters["memory"]; ok && set.Name == gpu {
				counters = true
			}
		}
		for _, d := range s.Spec.Devices {
			for _, cc := range d.ConsumesCounters {
				if cc.CounterSet == gpu {
					consumers[d.Name] = d
					pool = s.Spec.Pool.Name
				}
			}
		}
	}
	want := gpu + "-part-" + strconv.Itoa(m)
	part, ok := consumers[want]
	if !counters || len(consumers) != 3 || !ok || consumers[gpu].Name != gpu {
		c.t.Fatalf("the ResourceSlices publish counter set %s: %v, and devices consuming it %v; want the set, %s and its 2 partitions, %s among them (partitionedGPUs: 1)",
			gpu, counters, slices.Sorted(maps.Keys(consumers)), gpu, want)
	}
	return part, pool
}
