package cdi_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dranode/dranode/cdi"
)

func ExampleParseQualifiedName() {
	vendor, class, name, err := cdi.ParseQualifiedName("gpu.example.com/gpu=0")
	fmt.Println(vendor, class, name, err)

	_, _, _, err = cdi.ParseQualifiedName("gpu.example.com/gpu=0/1")
	var nameErr *cdi.NameError
	if errors.As(err, &nameErr) {
		fmt.Printf("%s, offset %d: %q\n", nameErr.Part, nameErr.Offset, nameErr.Char)
	}
	// Output:
	// gpu.example.com gpu 0 <nil>
	// device name, offset 1: '/'
}

func ExampleUpdateAnnotations() {
	annotations, err := cdi.UpdateAnnotations(nil, "gpu.example.com", "0f3c2a9e-7b1d-4c3e-9f8a-2b6d5e4c1a00",
		[]string{"gpu.example.com/gpu=1", "gpu.example.com/gpu=0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	keys, devices, err := cdi.ParseAnnotations(annotations)
	fmt.Println(keys)
	fmt.Println(devices, err)
	// Output:
	// [cdi.k8s.io/gpu.example.com_0f3c2a9e-7b1d-4c3e-9f8a-2b6d5e4c1a00]
	// [gpu.example.com/gpu=0 gpu.example.com/gpu=1] <nil>
}

// A driver name and a claim UID that together are longer than an
// annotation key allows: AnnotationKey refuses, ClaimAnnotationKey falls
// back to a short, stable ID derived from both.
func ExampleClaimAnnotationKey() {
	const driver = "accelerator-driver.compute.example.com"
	const claimUID = "0f3c2a9e-7b1d-4c3e-9f8a-2b6d5e4c1a00"
	_, err := cdi.AnnotationKey(driver, claimUID)
	fmt.Println(errors.Is(err, cdi.ErrInvalidAnnotation))

	key, err := cdi.ClaimAnnotationKey(driver, claimUID)
	fmt.Println(key, err)
	fmt.Println(key == "cdi.k8s.io/"+driver+"_"+cdi.ShortDeviceID(driver, claimUID))
	// Output:
	// true
	// cdi.k8s.io/accelerator-driver.compute.example.com_f12c6bc24f393ae5 <nil>
	// true
}

func ExampleSpec_Validate() {
	spec := &cdi.Spec{
		Version: "0.3.0",
		Kind:    "gpu.example.com/gpu",
		Devices: []cdi.Device{{
			Name: "0",
			ContainerEdits: cdi.ContainerEdits{
				DeviceNodes: []cdi.DeviceNode{{Path: "/dev/gpu0", Type: "x"}},
			},
		}},
	}
	var specErr *cdi.SpecError
	if errors.As(spec.Validate(), &specErr) {
		for _, p := range specErr.Problems {
			fmt.Println(p)
		}
	}
	spec.Version = cdi.MinimumVersion(spec)
	spec.Devices[0].ContainerEdits.DeviceNodes[0].Type = "c"
	fmt.Println(spec.Version, spec.Validate())
	// Output:
	// cdiVersion: "0.3.0" is too old for the features this spec uses: need at least 0.5.0
	// devices[0].containerEdits.deviceNodes[0].type: "x" is not one of b, c, u, p (or empty)
	// 0.5.0 <nil>
}

func ExampleSpecDir() {
	dir, err := os.MkdirTemp("", "cdi-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	specs := cdi.SpecDir{Path: dir}

	const claimUID = "0f3c2a9e-7b1d-4c3e-9f8a-2b6d5e4c1a00"
	spec := &cdi.Spec{
		Version: "0.5.0",
		Kind:    "k8s.gpu.example.com/" + cdi.ClaimClass,
		Devices: []cdi.Device{{
			// Unique across claims: the runtime rejects a device name that
			// two spec files of one kind define.
			Name:           claimUID + "-gpu-3",
			ContainerEdits: cdi.ContainerEdits{Env: []string{"GPU=3"}},
		}},
	}
	path, err := specs.Write(spec, claimUID)
	fmt.Println(filepath.Base(path), err)
	cdiIDs, err := spec.QualifiedNames() // for the kubelet
	fmt.Println(cdiIDs, err)

	// On a repeated Prepare: is the spec still there (someone may have
	// cleaned the directory)?
	_, exists, err := specs.Lookup("k8s.gpu.example.com", cdi.ClaimClass, claimUID)
	fmt.Println(exists, err)

	// On Unprepare:
	fmt.Println(specs.Remove("k8s.gpu.example.com", cdi.ClaimClass, claimUID))
	_, exists, err = specs.Lookup("k8s.gpu.example.com", cdi.ClaimClass, claimUID)
	fmt.Println(exists, err)
	// Output:
	// k8s.gpu.example.com-claim_0f3c2a9e-7b1d-4c3e-9f8a-2b6d5e4c1a00.json <nil>
	// [k8s.gpu.example.com/claim=0f3c2a9e-7b1d-4c3e-9f8a-2b6d5e4c1a00-gpu-3] <nil>
	// true <nil>
	// <nil>
	// false <nil>
}

// After a crash, remove the specs of claims the driver no longer holds.
func ExampleSpecDir_Sweep() {
	dir, err := os.MkdirTemp("", "cdi-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	specs := cdi.SpecDir{Path: dir}
	for _, uid := range []string{"claim-a", "claim-b"} {
		spec := &cdi.Spec{Version: "0.3.0", Kind: "gpu.example.com/claim", Devices: []cdi.Device{
			{Name: uid + "-gpu", ContainerEdits: cdi.ContainerEdits{Env: []string{"GPU=1"}}},
		}}
		if _, err := specs.Write(spec, uid); err != nil {
			fmt.Println(err)
			return
		}
	}
	prepared := map[string]bool{"claim-a": true} // from the driver's durable record
	removed, err := specs.Sweep("gpu.example.com", "claim", func(uid string) bool { return prepared[uid] })
	for _, path := range removed {
		fmt.Println("removed", filepath.Base(path))
	}
	fmt.Println(err)
	// Output:
	// removed gpu.example.com-claim_claim-b.json
	// <nil>
}
