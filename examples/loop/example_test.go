package loop_test

import (
	"fmt"

	"github.com/dranode/dranode/examples/loop"
)

// The defaults of a configuration that names only the number of disks,
// and where disk 1 appears in a container that claims it.
func Example() {
	cfg, err := loop.ParseConfig([]byte(`{"numDevices": 4}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.DriverName, *cfg.NumDevices, cfg.Size, cfg.StateDir)
	fmt.Println(loop.EnvName(cfg.DriverName, 1) + "=" + loop.ContainerPath(cfg, 1))
	// Output:
	// loop.example.com 4 16Mi /var/lib/dranode/loop
	// LOOP_DEVICE_LOOP_EXAMPLE_COM_1=/dev/loop.example.com/disk-1
}
