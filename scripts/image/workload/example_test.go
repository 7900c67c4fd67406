package workload_test

import (
	"fmt"

	"github.com/dranode/dranode/scripts/image/workload"
)

// A harness reads a container's log and checks what the container was given.
func ExampleParse() {
	log := []byte(`{"schema":"dranode.workload/v1","env":[{"name":"GPU_DEVICE_0","value":"gpu0"}],"devices":[{"path":"/dev/gpu0","type":"char","major":195,"minor":0}],"mounts":[{"mountPoint":"/","source":"overlay","fsType":"overlay","root":"/"}]}
env GPU_DEVICE_0=gpu0
device /dev/gpu0 char 195:0
`)
	r, err := workload.Parse(log)
	if err != nil {
		fmt.Println(err)
		return
	}
	v, _ := r.Getenv("GPU_DEVICE_0")
	d, _ := r.Device("/dev/gpu0")
	fmt.Println(v, d.Type, d.Major, d.Minor)
	// Output: gpu0 char 195 0
}
