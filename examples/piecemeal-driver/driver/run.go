package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/dranode/dranode/sliceclient"
)

// Options are what Run needs besides the driver's Config.
type Options struct {
	Config
	// Client reads claims (the helper does, on prepare) and writes the
	// driver's ResourceSlices.
	Client kubernetes.Interface
	// RegistryDir is where the kubelet's plugin watcher looks for
	// registration sockets (kubeletplugin.KubeletRegistryDir).
	RegistryDir string
	// PluginsDir is the kubelet's plugin directory
	// (kubeletplugin.KubeletPluginsDir); the DRA socket goes into
	// PluginsDir/<driver name>/.
	PluginsDir string
}

// Run serves the kubelet until ctx ends or the helper reports a fatal
// error: it opens the record (New), publishes the inventory with a
// sliceclient.Publisher, which also puts the slices back when the kubelet
// deletes them at its start, and starts the helper, which registers with
// the kubelet and serves DRA gRPC calls with the Driver. It returns nil
// when ctx ends and the error otherwise.
func Run(ctx context.Context, o Options) error {
	if o.Client == nil || o.RegistryDir == "" || o.PluginsDir == "" {
		return fmt.Errorf("%w: a client, the kubelet's registry directory and its plugins directory are required", ErrInvalidConfig)
	}
	d, err := New(ctx, o.Config)
	if err != nil {
		return err
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fatalErr := make(chan error, 1)
	d.fatal = func(err error) {
		select {
		case fatalErr <- err:
		default: // the first fatal error is the one reported
		}
		cancel()
	}
	log := klog.FromContext(ctx)

	// Before this module: helper.PublishResources(ctx, resourceslice.DriverResources{...}).
	publisher, err := sliceclient.New(sliceclient.Options{
		Client: sliceclient.Client{
			ResourceSlices: o.Client.ResourceV1().ResourceSlices(),
			Nodes:          o.Client.CoreV1().Nodes(),
		},
		DriverName: o.DriverName, NodeName: o.NodeName,
		// Failed syncs are retried with backoff; they are worth a log
		// line, not a restart.
		OnError: func(err error) { log.Error(err, "Publishing ResourceSlices") },
	})
	if err != nil {
		return err
	}
	if err := publisher.Update(d.Inventory()); err != nil {
		return err
	}
	if err := publisher.Start(ctx); err != nil {
		return fmt.Errorf("start publishing ResourceSlices: %w", err)
	}
	defer publisher.Stop()

	// The helper listens in the driver's own directory of the kubelet's
	// plugins directory but does not create it.
	dataDir := filepath.Join(o.PluginsDir, o.DriverName)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return fmt.Errorf("plugin data directory: %w", err)
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(o.DriverName),
		kubeletplugin.NodeName(o.NodeName),
		kubeletplugin.KubeClient(o.Client),
		kubeletplugin.RegistrarDirectoryPath(o.RegistryDir),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.HealthService(false),
		// The Driver serializes the calls of each claim itself (Driver's
		// doc); the helper's default would also make every pod's prepare
		// wait for every other's.
		kubeletplugin.Serialize(false),
	)
	if err != nil {
		return fmt.Errorf("start the kubelet plugin helper: %w", err)
	}
	defer helper.Stop()
	log.Info("Serving the kubelet", "driver", o.DriverName, "node", o.NodeName, "devices", o.NumDevices)

	<-ctx.Done()
	select {
	case err := <-fatalErr:
		return err
	default:
		return nil
	}
}
