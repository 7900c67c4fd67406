package pluginmgr

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dranode/dranode/inventory"
	pb "github.com/dranode/dranode/pluginmgr/proto/dranode/plugin/v1"
)

// ProtocolVersion is the go-plugin protocol version of this package's
// protocol (package dranode.plugin.v1).
const ProtocolVersion = 1

// pluginKey is the name of the one plugin in each go-plugin PluginSet.
const pluginKey = "driver"

// Handshake is the go-plugin handshake shared by the host and every driver
// plugin. The cookie is not a secret: it only stops a user (or another
// go-plugin host) from running a driver plugin by accident.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "DRANODE_DRIVER_PLUGIN",
	MagicCookieValue: "b0d3c6c1-5f4e-4f2b-9a55-dranode-v1",
}

// PluginSet is the go-plugin plugin set that serves driver over protocol
// version 1. Serve uses it; a plugin that also serves a later protocol
// version puts it next to the newer set in go-plugin's VersionedPlugins.
func PluginSet(driver Driver) plugin.PluginSet {
	return plugin.PluginSet{pluginKey: &grpcPlugin{driver: driver}}
}

// processStderr is the plugin process's real stderr, which the host reads
// as the log stream. go-plugin's Serve replaces os.Stderr with a pipe of its
// own (forwarded as raw output), so the logger must hold on to the original.
var processStderr = os.Stderr

// Logger returns the logger a plugin should use: JSON lines on the process's
// stderr, which go-plugin forwards into the host's log with their level and
// fields. It works before and after Serve starts.
func Logger(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      hclog.Trace,
		Output:     processStderr,
		JSONFormat: true,
	})
}

// Serve runs driver as a plugin for the dranode host and returns when the
// host is done with it. Call it from main; it exits the process with an
// explanation when the binary is run by hand instead of by the host.
func Serve(driver Driver) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{ProtocolVersion: PluginSet(driver)},
		GRPCServer:       plugin.DefaultGRPCServer,
		// go-plugin's own lines (its debug "plugin address") reach the
		// host's log with module="go-plugin", apart from the driver's.
		Logger: Logger("go-plugin"),
	})
}

// grpcPlugin adapts between go-plugin and the protocol on both sides.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	driver Driver
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterDriverPluginServer(s, &server{driver: p.driver})
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return pb.NewDriverPluginClient(c), nil
}

// server is the plugin-side implementation of the protocol.
type server struct {
	pb.UnimplementedDriverPluginServer
	driver Driver
}

// driverError keeps a status the driver chose and marks anything else as
// coming from the driver.
func driverError(method string, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Errorf(codes.Unknown, "driver %s: %v", method, err)
}

func (s *server) Info(ctx context.Context, _ *pb.InfoRequest) (*pb.InfoResponse, error) {
	info, err := s.driver.Info(ctx)
	if err != nil {
		return nil, driverError("Info", err)
	}
	_, health := s.driver.(HealthReporter)
	return &pb.InfoResponse{
		DriverName:        info.DriverName,
		DriverVersion:     info.DriverVersion,
		Health:            info.Health && health,
		OpaqueConfigKinds: info.OpaqueConfigKinds,
		StatelessPrepare:  info.StatelessPrepare,
	}, nil
}

func (s *server) Configure(ctx context.Context, req *pb.ConfigureRequest) (*pb.ConfigureResponse, error) {
	if err := s.driver.Configure(ctx, req.GetNodeName(), req.GetConfig()); err != nil {
		return nil, driverError("Configure", err)
	}
	return &pb.ConfigureResponse{}, nil
}

func (s *server) WatchDevices(_ *pb.WatchDevicesRequest, stream pb.DriverPlugin_WatchDevicesServer) error {
	err := s.driver.WatchDevices(stream.Context(), func(inv inventory.Inventory) error {
		msg, err := inventoryToWire(inv)
		if err != nil {
			return err
		}
		return stream.Send(msg)
	})
	if err != nil {
		return driverError("WatchDevices", err)
	}
	return nil
}

func (s *server) Prepare(ctx context.Context, req *pb.PrepareRequest) (*pb.PrepareResponse, error) {
	claims, err := claimsFromWire(req.GetClaims())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	results, err := s.driver.Prepare(ctx, claims)
	if err != nil {
		return nil, driverError("Prepare", err)
	}
	resp := &pb.PrepareResponse{Claims: make([]*pb.ClaimPrepareResult, len(results))}
	for i, r := range results {
		out := &pb.ClaimPrepareResult{Uid: string(r.ClaimUID)}
		if r.Err != nil {
			out.Error = r.Err.Error()
		} else if out.Devices, err = devicesToWire(r.Devices); err != nil {
			return nil, status.Error(codes.Internal, fmt.Sprintf("claim %s: %v", r.ClaimUID, err))
		}
		resp.Claims[i] = out
	}
	return resp, nil
}

func (s *server) Unprepare(ctx context.Context, req *pb.UnprepareRequest) (*pb.UnprepareResponse, error) {
	claims, err := preparedClaimsFromWire(req.GetClaims())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	results, err := s.driver.Unprepare(ctx, claims)
	if err != nil {
		return nil, driverError("Unprepare", err)
	}
	resp := &pb.UnprepareResponse{Claims: make([]*pb.ClaimUnprepareResult, len(results))}
	for i, r := range results {
		out := &pb.ClaimUnprepareResult{Uid: string(r.ClaimUID)}
		if r.Err != nil {
			out.Error = r.Err.Error()
		}
		resp.Claims[i] = out
	}
	return resp, nil
}

func (s *server) WatchHealth(_ *pb.WatchHealthRequest, stream pb.DriverPlugin_WatchHealthServer) error {
	hr, ok := s.driver.(HealthReporter)
	if !ok {
		return status.Error(codes.Unimplemented, "driver does not report device health")
	}
	err := hr.WatchHealth(stream.Context(), func(hs []DeviceHealth) error {
		return stream.Send(healthToWire(hs))
	})
	if err != nil {
		return driverError("WatchHealth", err)
	}
	return nil
}
