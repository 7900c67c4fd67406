package kubeletcompat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/dranode/dranode/checkpoint"
	current "github.com/dranode/dranode/checkpoint/kubeletcompat/internal/devicemanager/checkpoint"
	pre120 "github.com/dranode/dranode/checkpoint/kubeletcompat/internal/devicemanagerv1/checkpoint"
)

// DeviceManagerCheckpointFile is the name of the device manager's checkpoint
// inside the device plugin directory (by default
// /var/lib/kubelet/device-plugins).
const DeviceManagerCheckpointFile = "kubelet_internal_checkpoint"

// DeviceManagerFormat tells the device manager's checkpoint layouts apart.
type DeviceManagerFormat int

const (
	// FormatDevicesPerNUMA is the layout of Kubernetes 1.20 and later:
	// device IDs grouped by NUMA node.
	FormatDevicesPerNUMA DeviceManagerFormat = iota + 1
	// FormatDeviceList is the layout before Kubernetes 1.20: a flat list of
	// device IDs, no NUMA affinity (the kubelet now calls it "v1").
	FormatDeviceList
)

func (f DeviceManagerFormat) String() string {
	switch f {
	case FormatDevicesPerNUMA:
		return "devices-per-NUMA (1.20+)"
	case FormatDeviceList:
		return "device-list (pre-1.20)"
	default:
		return fmt.Sprintf("DeviceManagerFormat(%d)", int(f))
	}
}

// DeviceManagerCheckpoint is what the kubelet's device manager recorded about
// device plugin resources assigned to containers.
type DeviceManagerCheckpoint struct {
	// Format is the layout the file was written in.
	Format DeviceManagerFormat
	// Entries in the order the kubelet stored them.
	Entries []PodDevices
	// RegisteredDevices holds the device IDs each resource's plugin had
	// registered, by resource name.
	RegisteredDevices map[string][]string
}

// PodDevices is the devices of one resource assigned to one container.
type PodDevices struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	// DevicesPerNUMA holds device IDs by NUMA node ID. A pre-1.20 checkpoint
	// recorded no affinity: its devices are all under node 0, which is also
	// what the kubelet assumes when it upgrades such a file.
	DevicesPerNUMA map[int64][]string
	// AllocResp is the device plugin's serialized ContainerAllocateResponse
	// (protobuf, k8s.io/kubelet deviceplugin v1beta1), kept opaque.
	AllocResp []byte
}

// DeviceIDs returns the entry's device IDs across all NUMA nodes, sorted.
func (p PodDevices) DeviceIDs() []string {
	var ids []string
	for _, node := range slices.Sorted(maps.Keys(p.DevicesPerNUMA)) {
		ids = append(ids, p.DevicesPerNUMA[node]...)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// ReadDeviceManagerCheckpoint reads and verifies the kubelet device manager's
// checkpoint at path, in either layout. A missing file gives an error matching
// fs.ErrNotExist; a path that is not a regular file (ErrNotRegular) or holds
// more than MaxCheckpointSize bytes (ErrTooLarge) is refused without reading
// it. Every error names path.
func ReadDeviceManagerCheckpoint(path string) (DeviceManagerCheckpoint, error) {
	data, err := readCheckpoint(path, "device manager checkpoint")
	if err != nil {
		return DeviceManagerCheckpoint{}, err
	}
	return decodeDeviceManagerCheckpoint(path, data)
}

// DecodeDeviceManagerCheckpoint decodes and verifies the contents of a kubelet
// device manager checkpoint, in either layout. Its errors name no path (see
// DecodeDRAManagerState).
func DecodeDeviceManagerCheckpoint(data []byte) (DeviceManagerCheckpoint, error) {
	return decodeDeviceManagerCheckpoint("", data)
}

// dmProbe reads just enough of the file to tell the layouts apart: the shape
// of each entry's DeviceIDs (a list before 1.20, an object since).
type dmProbe struct {
	Data *struct {
		PodDeviceEntries []struct {
			DeviceIDs json.RawMessage
		}
	}
}

func decodeDeviceManagerCheckpoint(path string, data []byte) (DeviceManagerCheckpoint, error) {
	var probe dmProbe
	if err := json.Unmarshal(data, &probe); err != nil {
		return DeviceManagerCheckpoint{}, jsonError(path, data, "device manager checkpoint", true, err)
	}
	if probe.Data == nil {
		return DeviceManagerCheckpoint{}, &UnknownFormatError{Path: path, File: DeviceManagerCheckpointFile, Detail: "no Data field"}
	}
	var lists, objects int
	for _, e := range probe.Data.PodDeviceEntries {
		switch v := bytes.TrimSpace(e.DeviceIDs); {
		case len(v) > 0 && v[0] == '[':
			lists++
		case len(v) > 0 && v[0] == '{':
			objects++
		}
	}
	if lists > 0 && objects > 0 {
		return DeviceManagerCheckpoint{}, &UnknownFormatError{Path: path, File: DeviceManagerCheckpointFile,
			Detail: fmt.Sprintf("entries mix device ID lists (%d) and per-NUMA objects (%d)", lists, objects)}
	}

	// Without any DeviceIDs to look at, both layouts decode; the checksum,
	// which spells out the layout's Go types, decides.
	var mismatch error
	if lists == 0 {
		cp, err := decodeCurrent(path, data)
		if err == nil || objects > 0 {
			return cp, err
		}
		mismatch = err
	}
	cp, err := decodePre120(path, data)
	if err != nil && mismatch != nil {
		// Neither layout's checksum matches: report it as the current
		// layout, the one the kubelet would try.
		return cp, mismatch
	}
	return cp, err
}

func decodeCurrent(path string, data []byte) (DeviceManagerCheckpoint, error) {
	var file current.File
	if err := json.Unmarshal(data, &file); err != nil {
		return DeviceManagerCheckpoint{}, jsonError(path, data, "device manager checkpoint", true, err)
	}
	if computed := file.ComputeChecksum(); computed != file.Checksum {
		return DeviceManagerCheckpoint{}, checksumError(path, FormatDevicesPerNUMA, file.Checksum, computed)
	}
	cp := DeviceManagerCheckpoint{Format: FormatDevicesPerNUMA, RegisteredDevices: file.RegisteredDevices()}
	for _, e := range file.Entries() {
		cp.Entries = append(cp.Entries, PodDevices{
			PodUID: e.PodUID, ContainerName: e.ContainerName, ResourceName: e.ResourceName,
			DevicesPerNUMA: e.DeviceIDs, AllocResp: e.AllocResp,
		})
	}
	return cp, nil
}

func decodePre120(path string, data []byte) (DeviceManagerCheckpoint, error) {
	var file pre120.File
	if err := json.Unmarshal(data, &file); err != nil {
		return DeviceManagerCheckpoint{}, jsonError(path, data, "device manager checkpoint", true, err)
	}
	if computed := file.ComputeChecksum(); computed != file.Checksum {
		return DeviceManagerCheckpoint{}, checksumError(path, FormatDeviceList, file.Checksum, computed)
	}
	cp := DeviceManagerCheckpoint{Format: FormatDeviceList, RegisteredDevices: file.RegisteredDevices()}
	for _, e := range file.Entries() {
		cp.Entries = append(cp.Entries, PodDevices{
			PodUID: e.PodUID, ContainerName: e.ContainerName, ResourceName: e.ResourceName,
			DevicesPerNUMA: map[int64][]string{0: e.DeviceIDs}, AllocResp: e.AllocResp,
		})
	}
	return cp, nil
}

func checksumError(path string, format DeviceManagerFormat, stored, computed uint64) error {
	return &checkpoint.CorruptError{Path: path,
		Reason: fmt.Sprintf("device manager checkpoint (%s layout) does not match its checksum", format),
		Err:    &ChecksumError{Stored: stored, Computed: computed}}
}
