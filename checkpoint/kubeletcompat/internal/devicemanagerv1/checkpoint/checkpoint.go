package checkpoint

import (
	"hash/fnv"

	"github.com/davecgh/go-spew/spew"
)

// PodDevicesEntry is one container's devices of one resource, without NUMA
// affinity.
type PodDevicesEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     []string
	AllocResp     []byte
}

type checkpointData struct {
	PodDeviceEntries  []PodDevicesEntry
	RegisteredDevices map[string][]string
}

var hashConfig = spew.ConfigState{
	Indent:         " ",
	SortKeys:       true,
	DisableMethods: true,
	SpewKeys:       true,
}

// Checksum returns the checksum a pre-1.20 kubelet stored next to this data.
func Checksum(entries []PodDevicesEntry, registered map[string][]string) uint64 {
	data := checkpointData{PodDeviceEntries: entries, RegisteredDevices: registered}
	h := fnv.New32a()
	hashConfig.Fprintf(h, "%v", hashConfig.Sprintf("%#v", data))
	return uint64(h.Sum32())
}

// File is the whole checkpoint file as the kubelet marshals it to JSON.
type File struct {
	Data     checkpointData
	Checksum uint64
}

// Entries returns the stored pod device entries.
func (f *File) Entries() []PodDevicesEntry { return f.Data.PodDeviceEntries }

// RegisteredDevices returns the stored device IDs by resource name.
func (f *File) RegisteredDevices() map[string][]string { return f.Data.RegisteredDevices }

// ComputeChecksum returns the checksum of the stored data, for comparison
// with f.Checksum.
func (f *File) ComputeChecksum() uint64 {
	return Checksum(f.Data.PodDeviceEntries, f.Data.RegisteredDevices)
}
