// Command piecemeal-driver is a DRA kubelet plugin for simulated GPUs built
// on the upstream kubeletplugin helper and dranode's cdi, claimcache and
// sliceclient modules (see package driver and the README).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/examples/piecemeal-driver/driver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "piecemeal-driver:", err)
		os.Exit(1)
	}
}

func run() error {
	var o driver.Options
	var kubeconfig, bootIDFile string
	var qps float64
	var burst int
	flag.StringVar(&o.DriverName, "driver-name", "piecemeal.example.com", "DRA driver name (and CDI vendor)")
	flag.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "the node's name (default $NODE_NAME)")
	flag.IntVar(&o.NumDevices, "num-devices", 8, "simulated GPUs")
	flag.StringVar(&o.DevRoot, "dev-root", "/var/run/piecemeal/dev", "directory of the health markers gpuN.unhealthy")
	flag.StringVar(&o.HostDeviceNode, "host-device-node", driver.DefaultHostDeviceNode, "the real character or block device every simulated GPU's container node /dev/gpuN is made from")
	flag.StringVar(&o.CDIDir, "cdi-dir", "/var/run/cdi", "the container runtime's CDI spec directory")
	flag.StringVar(&o.StateDir, "state-dir", "/var/lib/piecemeal-driver", "the record of prepared claims (must survive reboots)")
	flag.StringVar(&bootIDFile, "boot-id-file", claimcache.BootIDPath, "file holding the current boot's ID")
	flag.StringVar(&o.RegistryDir, "registry-dir", kubeletplugin.KubeletRegistryDir, "the kubelet's plugin registration directory")
	flag.StringVar(&o.PluginsDir, "plugins-dir", kubeletplugin.KubeletPluginsDir, "the kubelet's plugins directory")
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster configuration)")
	// The helper reads every claim it prepares from the API server;
	// client-go's default of 5 requests per second would make a node
	// starting many pods wait on the client, not on the driver.
	flag.Float64Var(&qps, "kube-api-qps", 50, "requests per second to the API server")
	flag.IntVar(&burst, "kube-api-burst", 100, "burst of requests to the API server")
	klog.InitFlags(nil)
	flag.Parse()

	bootID, err := os.ReadFile(bootIDFile)
	if err != nil {
		return fmt.Errorf("boot ID: %w", err)
	}
	o.BootID = strings.TrimSpace(string(bootID))
	for _, dir := range []*string{&o.DevRoot, &o.CDIDir, &o.StateDir, &o.RegistryDir, &o.PluginsDir} {
		if *dir, err = filepath.Abs(*dir); err != nil {
			return err
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	if o.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return driver.Run(klog.NewContext(ctx, klog.Background()), o)
}
