// Command v1writer writes a kubelet device manager checkpoint in the pre-1.20
// layout with the kubelet's own code (k8s.io/kubernetes v1.30, the last
// releases that kept a writer for that layout), then reads it back through
// the kubelet's checkpoint manager, which verifies its checksum.
//
// Usage: v1writer DIR < spec.json, where spec.json is
// {"Entries": [PodDevicesEntryV1...], "RegisteredDevices": {...}}.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"

	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
)

const checkpointName = "kubelet_internal_checkpoint"

type spec struct {
	Entries           []checkpoint.PodDevicesEntryV1
	RegisteredDevices map[string][]string
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "v1writer:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 2 {
		return fmt.Errorf("usage: v1writer DIR < spec.json")
	}
	var in spec
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		return fmt.Errorf("decode spec: %w", err)
	}
	manager, err := checkpointmanager.NewCheckpointManager(os.Args[1])
	if err != nil {
		return err
	}
	if err := manager.CreateCheckpoint(checkpointName, checkpoint.NewV1(in.Entries, in.RegisteredDevices)); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	readBack := checkpoint.NewV1(nil, nil)
	if err := manager.GetCheckpoint(checkpointName, readBack); err != nil {
		return fmt.Errorf("the kubelet's v1 reader rejects what its v1 writer wrote: %w", err)
	}
	// The current-layout reader of the same kubelet must refuse the file:
	// that refusal is the upgrade bug the v1 reader was added for.
	if err := manager.GetCheckpoint(checkpointName, checkpoint.New(nil, nil)); err == nil && len(in.Entries) > 0 {
		return fmt.Errorf("the kubelet's current-layout reader accepted a v1 file with entries")
	}
	entries, registered := readBack.GetDataInLatestFormat()
	if len(entries) != len(in.Entries) || !reflect.DeepEqual(registered, in.RegisteredDevices) {
		return fmt.Errorf("read back %d entries and %v, wrote %d and %v", len(entries), registered, len(in.Entries), in.RegisteredDevices)
	}
	return nil
}
