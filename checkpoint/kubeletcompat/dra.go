package kubeletcompat

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"slices"
	"sort"

	"github.com/dranode/dranode/checkpoint"
)

// The identity the kubelet's DRA manager writes into its checkpoint data.
const (
	DRACheckpointKind       = "DRACheckpoint"
	DRACheckpointAPIVersion = "checkpoint.dra.kubelet.k8s.io/v1"
)

// DRAManagerStateFile is the name the kubelet gives its DRA checkpoint inside
// its DRA state directory (by default /var/lib/kubelet).
const DRAManagerStateFile = "dra_manager_state"

// DRAManagerState is what the kubelet's DRA manager recorded about the claims
// it prepared.
type DRAManagerState struct {
	// Claims in the order the kubelet stored them.
	Claims []DRAClaim
}

// DRAClaim is one prepared ResourceClaim.
type DRAClaim struct {
	UID       string
	Name      string
	Namespace string
	// PodUIDs are the pods that use the claim, sorted (the kubelet keeps a set).
	PodUIDs []string
	// Drivers holds what each DRA driver prepared, by driver name.
	Drivers map[string]DRADriverState
}

// DRADriverState is what one driver prepared for one claim.
type DRADriverState struct {
	Devices []DRADevice
	// SkipNodeOperations lists node operations the kubelet skips for this
	// driver (resource.k8s.io SkipNodeOperation values), if any.
	SkipNodeOperations []string
}

// DRADevice is one allocated device and what it was prepared as.
type DRADevice struct {
	PoolName   string
	DeviceName string
	// ShareID identifies one share of a device with consumable capacity;
	// empty for a device that is not shared.
	ShareID      string
	RequestNames []string
	// CDIDeviceIDs are fully qualified CDI device names (vendor/class=name).
	CDIDeviceIDs []string
}

// The mirrors below follow the kubelet's JSON layout; encoding/json matches
// field names case-insensitively, as it does for the kubelet.

type draFileJSON struct {
	Data     *string
	Checksum uint32
}

type draDataJSON struct {
	Kind               string `json:"kind"`
	APIVersion         string `json:"apiVersion"`
	ClaimInfoStateList []draClaimJSON
}

type draClaimJSON struct {
	ClaimUID    string
	ClaimName   string
	Namespace   string
	PodUIDs     map[string]struct{}
	DriverState map[string]draDriverStateJSON
}

type draDriverStateJSON struct {
	Devices            []draDeviceJSON
	SkipNodeOperations []string `json:"skipNodeOperations,omitempty"`
}

type draDeviceJSON struct {
	PoolName     string
	DeviceName   string
	ShareID      *string
	RequestNames []string
	CDIDeviceIDs []string
}

// ReadDRAManagerState reads and verifies the kubelet DRA manager's checkpoint
// at path. A missing file gives an error matching fs.ErrNotExist; a path that
// is not a regular file (ErrNotRegular) or holds more than MaxCheckpointSize
// bytes (ErrTooLarge) is refused without reading it. Every error names path.
func ReadDRAManagerState(path string) (DRAManagerState, error) {
	data, err := readCheckpoint(path, "DRA manager state")
	if err != nil {
		return DRAManagerState{}, err
	}
	return decodeDRAManagerState(path, data)
}

// DecodeDRAManagerState decodes and verifies the contents of a kubelet DRA
// manager checkpoint. Its errors have no path to name: they say "data", and
// a caller that read the bytes from a file can set the Path of the
// *checkpoint.CorruptError or *UnknownFormatError.
func DecodeDRAManagerState(data []byte) (DRAManagerState, error) {
	return decodeDRAManagerState("", data)
}

func decodeDRAManagerState(path string, data []byte) (DRAManagerState, error) {
	var file draFileJSON
	if err := json.Unmarshal(data, &file); err != nil {
		return DRAManagerState{}, jsonError(path, data, "DRA manager state", true, err)
	}
	if file.Data == nil {
		return DRAManagerState{}, &UnknownFormatError{Path: path, File: DRAManagerStateFile,
			Detail: "no Data field (not a " + DRACheckpointAPIVersion + " checkpoint)"}
	}
	inner := []byte(*file.Data)
	if computed := crc32.ChecksumIEEE(inner); computed != file.Checksum {
		return DRAManagerState{}, &checkpoint.CorruptError{Path: path, Reason: "DRA manager state does not match its checksum",
			Err: &ChecksumError{Stored: uint64(file.Checksum), Computed: uint64(computed)}}
	}
	var payload draDataJSON
	if err := json.Unmarshal(inner, &payload); err != nil {
		return DRAManagerState{}, jsonError(path, inner, "DRA manager state Data field", false, err)
	}
	if payload.Kind != DRACheckpointKind || payload.APIVersion != DRACheckpointAPIVersion {
		return DRAManagerState{}, &UnknownFormatError{Path: path, File: DRAManagerStateFile,
			Detail: fmt.Sprintf("kind %q, apiVersion %q (want %q, %q)", payload.Kind, payload.APIVersion, DRACheckpointKind, DRACheckpointAPIVersion)}
	}
	return payload.state(), nil
}

func (p draDataJSON) state() DRAManagerState {
	var state DRAManagerState
	for _, c := range p.ClaimInfoStateList {
		claim := DRAClaim{UID: c.ClaimUID, Name: c.ClaimName, Namespace: c.Namespace}
		for uid := range c.PodUIDs {
			claim.PodUIDs = append(claim.PodUIDs, uid)
		}
		sort.Strings(claim.PodUIDs)
		if c.DriverState != nil {
			claim.Drivers = make(map[string]DRADriverState, len(c.DriverState))
		}
		for driver, ds := range c.DriverState {
			out := DRADriverState{SkipNodeOperations: ds.SkipNodeOperations}
			for _, d := range ds.Devices {
				dev := DRADevice{PoolName: d.PoolName, DeviceName: d.DeviceName, RequestNames: d.RequestNames, CDIDeviceIDs: d.CDIDeviceIDs}
				if d.ShareID != nil {
					dev.ShareID = *d.ShareID
				}
				out.Devices = append(out.Devices, dev)
			}
			claim.Drivers[driver] = out
		}
		state.Claims = append(state.Claims, claim)
	}
	return state
}

// Claim returns the claim with the given UID.
func (s DRAManagerState) Claim(uid string) (DRAClaim, bool) {
	i := slices.IndexFunc(s.Claims, func(c DRAClaim) bool { return c.UID == uid })
	if i < 0 {
		return DRAClaim{}, false
	}
	return s.Claims[i], true
}
