package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/checkpoint/durable"
	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
)

// Device metadata (KEP-5304): for each request of a claim, a JSON file with
// the allocated devices' attributes, bind-mounted read-only into every
// container that uses the claim, at the path the Kubernetes documentation
// gives workloads:
//
//	/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/<driver>-metadata.json
//	/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/<pod claim name>/<request>/<driver>-metadata.json
//
// (the second for a claim made from a template: the pod's own name for it,
// from the claim's resource.kubernetes.io/pod-claim-name annotation). The
// file is the same object encoded in metadata.resource.k8s.io/v1beta1 and
// then v1alpha1, one after the other (a JSON stream, newest first), as the
// upstream kubeletplugin helper of Kubernetes 1.37 writes it, so that a
// consumer built against 1.36's decoder (v1alpha1 only) or 1.37's reads it.
// The mount is one more CDI device in the claim's own spec, whose ID the
// kubelet gets with the request's first device; the host file lives under
// the driver's directory of kubelet.pluginsDir, per claim UID (the upstream
// helper keys it by namespace and name; a UID cannot be reused by the next
// claim of the same name before the old one's files are gone).
const (
	metadataContainerDir = "/var/run/kubernetes.io/dra-device-attributes"
	metadataSubdir       = "dra-device-metadata"
	metadataGroup        = "metadata.resource.k8s.io"
)

// metadataVersions are written in this order: newest first.
var metadataVersions = []string{"v1beta1", "v1alpha1"}

// deviceMetadata is metadata.resource.k8s.io's DeviceMetadata, in the field
// order the upstream encoder writes.
type deviceMetadata struct {
	Kind         string            `json:"kind"`
	APIVersion   string            `json:"apiVersion"`
	Metadata     metadataObject    `json:"metadata"`
	PodClaimName *string           `json:"podClaimName,omitempty"`
	Requests     []metadataRequest `json:"requests,omitempty"`
}

type metadataObject struct {
	Name       string `json:"name"`
	Namespace  string `json:"namespace"`
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
}

type metadataRequest struct {
	Name    string           `json:"name"`
	Devices []metadataDevice `json:"devices,omitempty"`
}

type metadataDevice struct {
	Driver      string                                                  `json:"driver"`
	Pool        string                                                  `json:"pool"`
	Name        string                                                  `json:"name"`
	Attributes  map[resourcev1.QualifiedName]resourcev1.DeviceAttribute `json:"attributes,omitempty"`
	NetworkData *resourcev1.NetworkDeviceData                           `json:"networkData,omitempty"`
}

// metadataDir is where the metadata files of a claim's devices of a driver
// are kept on the host.
func metadataDir(pluginsDir, driverName, claimUID string) string {
	return filepath.Join(pluginsDir, driverName, metadataSubdir, claimUID)
}

// metadataContainerPath is where a request's file appears in containers.
func metadataContainerPath(driverName string, claim *resourcev1.ResourceClaim, request string) string {
	if podClaim := claim.Annotations[resourcev1.PodResourceClaimAnnotation]; podClaim != "" {
		return path.Join(metadataContainerDir, "resourceclaimtemplates", podClaim, request, driverName+"-metadata.json")
	}
	return path.Join(metadataContainerDir, "resourceclaims", claim.Name, request, driverName+"-metadata.json")
}

// baseRequest is the request of "request/subrequest" (a prioritized list's
// choice): files are per request, as the workload names it in the pod.
func baseRequest(request string) string {
	base, _, _ := strings.Cut(request, "/")
	return base
}

// encodeMetadata is a request's metadata file: the object once per version,
// each followed by a newline.
func encodeMetadata(claim *resourcev1.ResourceClaim, request string, devices []metadataDevice) ([]byte, error) {
	dm := deviceMetadata{
		Kind:     "DeviceMetadata",
		Metadata: metadataObject{Name: claim.Name, Namespace: claim.Namespace, UID: string(claim.UID), Generation: 1},
		Requests: []metadataRequest{{Name: request, Devices: devices}},
	}
	if podClaim, ok := claim.Annotations[resourcev1.PodResourceClaimAnnotation]; ok {
		dm.PodClaimName = &podClaim
	}
	var buf bytes.Buffer
	for _, v := range metadataVersions {
		dm.APIVersion = metadataGroup + "/" + v
		b, err := json.MarshalIndent(dm, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encoding device metadata: %w", err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), nil
}

// addMetadata writes the metadata file of each request of the claim with
// devices of the driver, adds a CDI device mounting it to spec, and names
// that CDI device on the request's first recorded device, so that the
// kubelet hands it to every container using the request. Attributes come
// from the driver's latest inventory, network data from the status the
// plugin returned.
func addMetadata(pluginsDir, driverName string, claim *resourcev1.ResourceClaim, inv inventory.Inventory, results []resourcev1.DeviceRequestAllocationResult,
	prepared []pluginmgr.PreparedDevice, spec *cdi.Spec, recorded []claimcache.Device) error {
	attrs := map[inventory.DeviceID]map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}
	for _, p := range inv.Pools {
		for _, d := range p.Devices {
			attrs[inventory.DeviceID{Pool: p.Name, Device: d.Name}] = d.Attributes
		}
	}
	network := map[inventory.DeviceID]*resourcev1.NetworkDeviceData{}
	for _, p := range prepared {
		if p.Status != nil && p.Status.NetworkData != nil {
			network[inventory.DeviceID{Pool: p.Pool, Device: p.Device}] = p.Status.NetworkData
		}
	}
	var order []string
	byRequest := map[string][]metadataDevice{}
	fullName := map[string]string{}
	for _, r := range results {
		req := baseRequest(r.Request)
		if _, seen := byRequest[req]; !seen {
			order = append(order, req)
			fullName[req] = r.Request
		}
		id := inventory.DeviceID{Pool: r.Pool, Device: r.Device}
		byRequest[req] = append(byRequest[req], metadataDevice{Driver: driverName, Pool: r.Pool, Name: r.Device, Attributes: attrs[id], NetworkData: network[id]})
	}
	dir := metadataDir(pluginsDir, driverName, string(claim.UID))
	for _, req := range order {
		data, err := encodeMetadata(claim, fullName[req], byRequest[req])
		if err != nil {
			return err
		}
		file := filepath.Join(dir, req, "metadata.json")
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return fmt.Errorf("device metadata of request %s: %w", req, err)
		}
		// Derived from the claim and the inventory, like the CDI spec:
		// written whole, without fsync (writeSpecs says why).
		if err := (durable.Writer{NoSync: true}).WriteFile(file, data, 0o644); err != nil {
			return fmt.Errorf("device metadata of request %s: %w", req, err)
		}
		name := string(claim.UID) + "_metadata_" + req
		if err := cdi.ValidateDeviceName(name); err != nil {
			return fmt.Errorf("device metadata of request %s: %w", req, err)
		}
		spec.Devices = append(spec.Devices, cdi.Device{Name: name, ContainerEdits: cdi.ContainerEdits{Mounts: []cdi.Mount{{
			HostPath: file, ContainerPath: metadataContainerPath(driverName, claim, req), Options: []string{"ro", "bind"},
		}}}})
		id := cdi.QualifiedName(driverName, cdi.ClaimClass, name)
		for i := range recorded {
			if requestsInclude(recorded[i].Requests, req) {
				recorded[i].CDIDeviceIDs = append(recorded[i].CDIDeviceIDs, id)
				break
			}
		}
	}
	spec.Version = cdi.MinimumVersion(spec)
	return nil
}

// requestsInclude reports whether a device's requests name req, itself or
// one of its subrequests.
func requestsInclude(requests []string, req string) bool {
	for _, r := range requests {
		if baseRequest(r) == req {
			return true
		}
	}
	return false
}

// removeMetadata removes a claim's metadata files of a driver; none is fine.
func removeMetadata(pluginsDir, driverName, claimUID string) error {
	if err := os.RemoveAll(metadataDir(pluginsDir, driverName, claimUID)); err != nil {
		return fmt.Errorf("removing device metadata: %w", err)
	}
	return nil
}

// sweepMetadata removes the metadata files of a driver's claims that are
// not recorded (a prepare that failed before recording its claim, or files
// left when the record was lost) and returns the claim UIDs removed.
func sweepMetadata(pluginsDir, driverName string, recorded func(uid string) bool) ([]string, error) {
	dir := filepath.Join(pluginsDir, driverName, metadataSubdir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sweeping device metadata: %w", err)
	}
	var removed []string
	for _, e := range entries {
		if !e.IsDir() || recorded(e.Name()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return removed, fmt.Errorf("sweeping device metadata: %w", err)
		}
		removed = append(removed, e.Name())
	}
	return removed, nil
}
