package cli_test

import (
	"context"
	"fmt"
	"os"

	"github.com/dranode/dranode/tools/internal/cli"
)

// Inspect the kubelet's DRA manager state: the format is recognised by the
// content and the checksum the kubelet stored is verified.
func ExampleRun_checkpointInspect() {
	code := cli.Run(context.Background(),
		[]string{"checkpoint", "inspect", "../../../checkpoint/kubeletcompat/testdata/dra_manager_state/one-claim"},
		os.Stdout, os.Stderr)
	fmt.Println("exit", code)
	// Output:
	// PATH      ../../../checkpoint/kubeletcompat/testdata/dra_manager_state/one-claim
	// FORMAT    kubelet-dra-manager-state
	// KIND      DRACheckpoint
	// VERSION   checkpoint.dra.kubelet.k8s.io/v1
	// CHECKSUM  ok
	//
	// CLAIM              UID                                   PODS  DRIVER           POOL/DEVICE   CDI DEVICE IDS
	// default/gpu-claim  0b7c3d2e-6f4a-4c1b-9a8e-1d2c3b4a5f60  1     gpu.example.com  node-a/gpu-0  example.com/gpu=claim-0b7c3d2e-gpu-0
	// exit 0
}

func ExampleRun_cdiParse() {
	code := cli.Run(context.Background(), []string{"cdi", "parse", "gpu.example.com/gpu=gpu-0", "-o", "yaml"}, os.Stdout, os.Stdout)
	fmt.Println("exit", code)
	code = cli.Run(context.Background(), []string{"cdi", "parse", "gpu.example.com/gpu"}, os.Stdout, os.Stdout)
	fmt.Println("exit", code)
	// Output:
	// class: gpu
	// device: gpu-0
	// kind: gpu.example.com/gpu
	// name: gpu.example.com/gpu=gpu-0
	// vendor: gpu.example.com
	// exit 0
	// dranodectl: cdi parse: cdi: invalid qualified device name "gpu.example.com/gpu": has no "=" between the class and the device name
	// exit 1
}
