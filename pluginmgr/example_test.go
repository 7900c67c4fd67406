package pluginmgr_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr/funcr"
	"github.com/hashicorp/go-hclog"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/internal/testbin"
)

// Launch a plugin binary (here the module's test plugin, built by TestMain),
// read its inventory and prepare a claim through it.
func ExampleLaunch() {
	p, err := pluginmgr.Launch(context.Background(), pluginmgr.PluginConfig{
		Name:   "test",
		Path:   testDriverPath,                 // absolute path, from the configuration
		SHA256: testbin.SHA256(testDriverPath), // from the configuration too
		Config: []byte(`{"devices": 2}`),
	}, pluginmgr.Options{NodeName: "node-1", Logger: hclog.NewNullLogger()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	inv, _, err := p.WaitInventory(context.Background(), 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Info().DriverName, "publishes", len(inv.Pools[0].Devices), "devices in pool", inv.Pools[0].Name)

	results, err := p.Prepare(context.Background(), []pluginmgr.Claim{{
		UID: "c1", Namespace: "default", Name: "gpu-claim",
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: "test.dranode.dev", Pool: "node", Device: "dev1"}},
	}})
	switch {
	case errors.Is(err, pluginmgr.ErrPluginUnavailable):
		fmt.Println("plugin restarting; retry later")
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println(results[0].Devices[0].Edits.Env)
	}
	// Output:
	// test.dranode.dev publishes 2 devices in pool node
	// [TEST_DEVICE=dev1]
}

// A wrong digest refuses to start the binary and names both digests.
func ExampleChecksumError() {
	_, err := pluginmgr.Launch(context.Background(), pluginmgr.PluginConfig{
		Path:   testDriverPath,
		SHA256: "0000000000000000000000000000000000000000000000000000000000000000",
	}, pluginmgr.Options{Logger: hclog.NewNullLogger()})
	var ce *pluginmgr.ChecksumError
	if errors.As(err, &ce) {
		fmt.Println("refused:", ce.Expected[:8], "expected,", ce.Actual == testbin.SHA256(testDriverPath), "actual digest reported")
	}
	// Output:
	// refused: 00000000 expected, true actual digest reported
}

// A host that logs with logr (klog in the agent) hands plugins' logs to it
// through LogrLogger; here funcr prints what klog would format.
func ExampleLogrLogger() {
	log := funcr.New(func(_, args string) { fmt.Println(args) }, funcr.Options{Verbosity: 4})
	h := pluginmgr.LogrLogger(log).Named("gpu")
	h.Info("configured", "devices", 8)
	h.Warn("device unhealthy", "device", "gpu-1")
	h.Debug("details")
	h.Trace("off below V(5)")
	h.Error("prepare failed", "error", "no such device")
	// Output:
	// "level"=0 "msg"="configured" "plugin"="gpu" "level"="info" "devices"=8
	// "level"=0 "msg"="device unhealthy" "plugin"="gpu" "level"="warn" "device"="gpu-1"
	// "level"=4 "msg"="details" "plugin"="gpu" "level"="debug"
	// "msg"="prepare failed" "error"="no such device" "plugin"="gpu" "level"="error"
}
