package checkpoint_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/dranode/dranode/checkpoint"
)

// Version 2 of a driver's state renamed "gpu" to "devices" and made it a
// list. Files written by version 1 still load.
type driverState struct {
	Devices []string `json:"devices"`
}

var driverSchema = checkpoint.Schema{
	Kind:    "example.com/driver-state",
	Version: 2,
	Migrations: map[int]func(json.RawMessage) (json.RawMessage, error){
		1: func(v1 json.RawMessage) (json.RawMessage, error) {
			var old struct {
				GPU string `json:"gpu"`
			}
			if err := json.Unmarshal(v1, &old); err != nil {
				return nil, err
			}
			return json.Marshal(driverState{Devices: []string{old.GPU}})
		},
	},
}

func ExampleOpenFile() {
	dir, err := os.MkdirTemp("", "checkpoint-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	f, err := checkpoint.OpenFile[driverState](filepath.Join(dir, "state"), driverSchema)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()

	state, err := f.Load()
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Println("no state yet")
	} else if err != nil {
		log.Fatal(err) // corrupt, newer version, migration failure
	}
	state.Devices = append(state.Devices, "gpu-0")
	if err := f.Save(state); err != nil { // durable when it returns
		log.Fatal(err)
	}
	state, err = f.Load()
	fmt.Println(state.Devices, err)
	// Output:
	// no state yet
	// [gpu-0] <nil>
}

func ExampleOpenFile_corruptPolicy() {
	dir, err := os.MkdirTemp("", "checkpoint-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state")
	os.WriteFile(path, []byte("not a checkpoint"), 0o600)

	f, err := checkpoint.OpenFile[driverState](path, driverSchema,
		checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	_, err = f.Load()
	var moved *checkpoint.MovedAsideError
	if errors.As(err, &moved) {
		fmt.Println("start fresh:", errors.Is(err, fs.ErrNotExist))
		fmt.Println("why:", moved.Cause.Reason)
	}
	// Output:
	// start fresh: true
	// why: magic "not a ch", want "DRNFILE1"
}

func ExampleOpenJournal() {
	dir, err := os.MkdirTemp("", "checkpoint-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	schema := checkpoint.Schema{Kind: "example.com/claims", Version: 1}

	j, err := checkpoint.OpenJournal[driverState](dir, schema)
	if err != nil {
		log.Fatal(err)
	}
	// Each call is durable when it returns; concurrent calls share fsyncs.
	j.Put("claim-a", driverState{Devices: []string{"gpu-0"}})
	j.Put("claim-b", driverState{Devices: []string{"gpu-1"}})
	j.Commit( // all or nothing
		checkpoint.Change[driverState]{Key: "claim-a", Delete: true},
		checkpoint.Change[driverState]{Key: "claim-c", Value: driverState{Devices: []string{"gpu-0"}}},
	)
	j.Close()

	j, err = checkpoint.OpenJournal[driverState](dir, schema)
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()
	state := j.Snapshot()
	for _, key := range slices.Sorted(maps.Keys(state)) {
		fmt.Println(key, state[key].Devices)
	}
	// Output:
	// claim-b [gpu-1]
	// claim-c [gpu-0]
}

// A release that changes the format can keep the previous release working
// after a rollback: it also writes a copy in the previous version.
func ExampleWithDowngradeCopy() {
	dir, err := os.MkdirTemp("", "checkpoint-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state")

	// Version 2 (driverSchema) writes, with a copy for version 1.
	toV1 := func(v2 json.RawMessage) (json.RawMessage, error) {
		var s driverState
		if err := json.Unmarshal(v2, &s); err != nil || len(s.Devices) == 0 {
			return nil, fmt.Errorf("cannot express %s in version 1", v2)
		}
		return json.Marshal(map[string]string{"gpu": s.Devices[0]})
	}
	f, err := checkpoint.OpenFile[driverState](path, driverSchema, checkpoint.WithDowngradeCopy(toV1))
	if err != nil {
		log.Fatal(err)
	}
	if err := f.Save(driverState{Devices: []string{"gpu-3"}}); err != nil {
		log.Fatal(err)
	}
	f.Close()

	// The previous release only knows version 1, and still loads.
	type stateV1 struct {
		GPU string `json:"gpu"`
	}
	old, err := checkpoint.OpenFile[stateV1](path, checkpoint.Schema{Kind: driverSchema.Kind, Version: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer old.Close()
	v1, err := old.Load()
	fmt.Println(v1.GPU, err)
	// Output:
	// gpu-3 <nil>
}

// A byte flipped in the middle of a journal's log costs only what follows
// it: under MoveCorruptAside the records before it are restored, the rest
// is copied aside, and the changes that can still be read after it are
// reported for the caller to check elsewhere, never applied.
func ExampleJournal_Recovery() {
	dir, err := os.MkdirTemp("", "recovery")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	schema := checkpoint.Schema{Kind: "example.com/claims", Version: 1}

	j, err := checkpoint.OpenJournal[string](dir, schema)
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range []string{"claim-a", "claim-b", "claim-c"} {
		if err := j.Put(k, "prepared"); err != nil {
			log.Fatal(err)
		}
	}
	j.Close()

	// Damage claim-b's record.
	path := filepath.Join(dir, "log.1")
	data, _ := os.ReadFile(path)
	data[slices.Index(data, 'b')] = 'B'
	os.WriteFile(path, data, 0o600)

	if _, err := checkpoint.OpenJournal[string](dir, schema); errors.Is(err, checkpoint.ErrCorrupt) {
		fmt.Println("default policy: refused, nothing changed")
	}
	j, err = checkpoint.OpenJournal[string](dir, schema, checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside))
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()
	rec := j.Recovery()
	fmt.Println("restored:", slices.Sorted(maps.Keys(j.Snapshot())))
	fmt.Println("records kept:", rec.Kept)
	for _, u := range rec.Unsure {
		fmt.Printf("not applied: %s = %q\n", u.Key, u.Value)
	}
	fmt.Println("some bytes unreadable:", rec.Unreadable > 0, "complete:", rec.Complete())
	fmt.Println("copied aside:", len(rec.Aside), filepath.Base(rec.Aside[0].From))
	// Output:
	// default policy: refused, nothing changed
	// restored: [claim-a]
	// records kept: 1
	// not applied: claim-c = "prepared"
	// some bytes unreadable: true complete: false
	// copied aside: 1 log.1
}
