package agent

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"

	"github.com/dranode/dranode/pluginmgr"
)

// TestHealthStreamRepeatsUnchangedSnapshot: the kubelet reads a device's
// health as Unknown once its last report is 30 seconds old, so the stream
// repeats an unchanged snapshot, each time stamped anew. Over v1alpha1, the
// only health service of the 1.34–1.36 kubelets, with its generated client.
func TestHealthStreamRepeatsUnchangedSnapshot(t *testing.T) {
	feed := newHealthFeed()
	feed.set([]pluginmgr.DeviceHealth{{Pool: "node-a", Device: "gpu-0", Status: pluginmgr.Unhealthy}})
	srv := grpc.NewServer()
	registerHealth(srv, &healthService{d: &driver{healthy: feed}, resend: 20 * time.Millisecond})
	lis, err := net.Listen("unix", filepath.Join(t.TempDir(), "dra.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := drahealthv1alpha1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1alpha1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var stamps []int64
	for range 3 {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(msg.Devices) != 1 || msg.Devices[0].Device.DeviceName != "gpu-0" || msg.Devices[0].Health != drahealthv1alpha1.HealthStatus_UNHEALTHY {
			t.Fatalf("snapshot %d: %v, want gpu-0 unhealthy", len(stamps), msg.Devices)
		}
		stamps = append(stamps, msg.Devices[0].LastUpdatedTime)
	}
	for i := 1; i < len(stamps); i++ {
		if stamps[i] < stamps[i-1] {
			t.Errorf("repeated snapshot stamped %d after %d", stamps[i], stamps[i-1])
		}
	}
}
