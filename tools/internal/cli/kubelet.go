package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drav1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerv1 "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// ErrDriverNotRegistered: no registration socket in the registry directory
// answers GetInfo as a DRA plugin of the driver.
var ErrDriverNotRegistered = errors.New("driver not registered")

// ErrClaimFailed: the driver answered, but reported an error for at least one
// claim.
var ErrClaimFailed = errors.New("driver failed a claim")

// claimArg is one --claim NAMESPACE/NAME/UID.
type claimArg struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

type claimList []claimArg

func (l *claimList) String() string {
	s := make([]string, len(*l))
	for i, c := range *l {
		s[i] = c.Namespace + "/" + c.Name + "/" + c.UID
	}
	return strings.Join(s, ",")
}

func (l *claimList) Type() string { return "NAMESPACE/NAME/UID" }

func (l *claimList) Set(v string) error {
	parts := strings.Split(v, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return fmt.Errorf("%q: want NAMESPACE/NAME/UID", v)
	}
	*l = append(*l, claimArg{Namespace: parts[0], Name: parts[1], UID: parts[2]})
	return nil
}

type kubeletDevice struct {
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	Requests     []string `json:"requests,omitempty"`
	ShareID      string   `json:"shareID,omitempty"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
}

type kubeletClaimResult struct {
	Claim   claimArg        `json:"claim"`
	Devices []kubeletDevice `json:"devices,omitempty"`
	Error   string          `json:"error,omitempty"`
}

type kubeletReport struct {
	Operation    string               `json:"operation"`
	Driver       string               `json:"driver"`
	Registration string               `json:"registrationSocket"`
	Endpoint     string               `json:"endpoint"`
	Claims       []kubeletClaimResult `json:"claims"`
}

func (r *kubeletReport) table(w *tabwriter.Writer) {
	if r.Operation == "prepare" {
		fmt.Fprintln(w, "CLAIM\tUID\tPOOL/DEVICE\tREQUESTS\tCDI DEVICE IDS\tERROR")
	} else {
		fmt.Fprintln(w, "CLAIM\tUID\tRESULT")
	}
	for _, c := range r.Claims {
		name := c.Claim.Namespace + "/" + c.Claim.Name
		if r.Operation != "prepare" {
			res := "unprepared"
			if c.Error != "" {
				res = "error: " + c.Error
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", name, c.Claim.UID, res)
			continue
		}
		if c.Error != "" || len(c.Devices) == 0 {
			fmt.Fprintf(w, "%s\t%s\t-\t-\t-\t%s\n", name, c.Claim.UID, dash(c.Error))
		}
		for _, d := range c.Devices {
			fmt.Fprintf(w, "%s\t%s\t%s/%s\t%s\t%s\t-\n", name, c.Claim.UID, d.Pool, d.Device, strings.Join(d.Requests, ","), strings.Join(d.CDIDeviceIDs, ","))
		}
	}
}

func kubeletCommand() *cobra.Command {
	leaf := func(op string) *cobra.Command {
		c := &cobra.Command{
			Use:   op + " --driver NAME --claim NAMESPACE/NAME/UID [--claim ...] [--registry-dir DIR]",
			Short: fmt.Sprintf("play the kubelet: call the driver's Node%sResources for claims", strings.ToUpper(op[:1])+op[1:]),
			Long: `Finds the driver's registration socket in --registry-dir (<driver>-reg.sock, or
any socket whose GetInfo names the driver as a DRAPlugin), calls GetInfo and
NotifyRegistrationStatus as the kubelet does, connects to the DRA endpoint the
driver announced and calls the DRA v1 service for every --claim.`,
			Args: exactArgs(),
		}
		fs := c.Flags()
		registry := fs.String("registry-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration directory")
		driver := fs.String("driver", "", "DRA driver name (required)")
		var claims claimList
		fs.Var(&claims, "claim", "NAMESPACE/NAME/UID of a claim; repeat for several (required)")
		timeout := fs.Duration("timeout", 30*time.Second, "bound on the whole exchange")
		notify := fs.Bool("notify-registration", true, "tell the driver it is registered, as the kubelet does after GetInfo")
		return leaf(c, func(c *cobra.Command, _ []string, format outputFormat) error {
			if *driver == "" {
				return usagef("--driver is required")
			}
			if len(claims) == 0 {
				return usagef("at least one --claim NAMESPACE/NAME/UID is required")
			}
			ctx, cancel := context.WithTimeout(c.Context(), *timeout)
			defer cancel()
			rep, err := kubeletCall(ctx, op, *registry, *driver, claims, *notify)
			if err != nil {
				return fmt.Errorf("kubelet %s: %w", op, err)
			}
			if err := render(c.OutOrStdout(), format, rep); err != nil {
				return err
			}
			var failed []string
			for _, c := range rep.Claims {
				if c.Error != "" {
					failed = append(failed, c.Claim.Namespace+"/"+c.Claim.Name)
				}
			}
			if len(failed) > 0 {
				return fmt.Errorf("kubelet %s: %s: %w", op, strings.Join(failed, ", "), ErrClaimFailed)
			}
			return nil
		})
	}
	return group(&cobra.Command{
		Use:   "kubelet",
		Short: "play the kubelet's side of DRA against a running driver",
	}, leaf("prepare"), leaf("unprepare"))
}

// dialUnix connects to a Unix socket. The path is made absolute first: in a
// "unix://" target a relative path's first element would be read as the
// URL's authority.
func dialUnix(path string) (*grpc.ClientConn, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// findDriver returns the registration socket and info of driver: its
// conventional socket first, then every other socket in dir.
func findDriver(ctx context.Context, dir, driver string) (string, *registerv1.PluginInfo, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, fmt.Errorf("registry directory: %w", err)
	}
	conventional := driver + "-reg.sock"
	var sockets []string
	for _, en := range entries {
		if en.Type()&os.ModeSocket != 0 {
			sockets = append(sockets, en.Name())
		}
	}
	sort.SliceStable(sockets, func(i, j int) bool { return sockets[i] == conventional && sockets[j] != conventional })
	var tried []string
	for _, name := range sockets {
		path := filepath.Join(dir, name)
		info, err := getInfo(ctx, path)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		if info.Type == registerv1.DRAPlugin && info.Name == driver {
			return path, info, nil
		}
		tried = append(tried, fmt.Sprintf("%s: %s plugin %q", name, info.Type, info.Name))
	}
	if len(tried) == 0 {
		tried = []string{"no sockets"}
	}
	return "", nil, fmt.Errorf("%s in %s (%s): %w", driver, dir, strings.Join(tried, "; "), ErrDriverNotRegistered)
}

func getInfo(ctx context.Context, path string) (*registerv1.PluginInfo, error) {
	conn, err := dialUnix(path)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return registerv1.NewRegistrationClient(conn).GetInfo(ctx, &registerv1.InfoRequest{})
}

func kubeletCall(ctx context.Context, op, dir, driver string, claims claimList, notify bool) (*kubeletReport, error) {
	regPath, info, err := findDriver(ctx, dir, driver)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(info.SupportedVersions, drav1.DRAPluginService) {
		return nil, fmt.Errorf("driver %s supports %v, not the DRA v1 service %s", driver, info.SupportedVersions, drav1.DRAPluginService)
	}
	if notify {
		conn, err := dialUnix(regPath)
		if err != nil {
			return nil, err
		}
		_, err = registerv1.NewRegistrationClient(conn).NotifyRegistrationStatus(ctx, &registerv1.RegistrationStatus{PluginRegistered: true})
		conn.Close()
		if err != nil {
			return nil, fmt.Errorf("NotifyRegistrationStatus on %s: %w", regPath, err)
		}
	}
	endpoint := info.Endpoint
	if !filepath.IsAbs(endpoint) {
		return nil, fmt.Errorf("driver %s announced endpoint %q: want an absolute socket path", driver, endpoint)
	}
	conn, err := dialUnix(endpoint)
	if err != nil {
		return nil, fmt.Errorf("DRA endpoint %s: %w", endpoint, err)
	}
	defer conn.Close()
	client := drav1.NewDRAPluginClient(conn)
	reqClaims := make([]*drav1.Claim, len(claims))
	for i, c := range claims {
		reqClaims[i] = &drav1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: c.UID}
	}
	rep := &kubeletReport{Operation: op, Driver: driver, Registration: regPath, Endpoint: endpoint}
	switch op {
	case "prepare":
		resp, err := client.NodePrepareResources(ctx, &drav1.NodePrepareResourcesRequest{Claims: reqClaims})
		if err != nil {
			return nil, fmt.Errorf("NodePrepareResources on %s: %w", endpoint, err)
		}
		for _, c := range claims {
			res := kubeletClaimResult{Claim: c}
			r, ok := resp.Claims[c.UID]
			switch {
			case !ok:
				res.Error = "driver returned no result for this claim"
			case r.Error != "":
				res.Error = r.Error
			default:
				for _, d := range r.Devices {
					kd := kubeletDevice{Pool: d.PoolName, Device: d.DeviceName, Requests: d.RequestNames, CDIDeviceIDs: d.CdiDeviceIds}
					if d.ShareId != nil {
						kd.ShareID = *d.ShareId
					}
					res.Devices = append(res.Devices, kd)
				}
			}
			rep.Claims = append(rep.Claims, res)
		}
	default:
		resp, err := client.NodeUnprepareResources(ctx, &drav1.NodeUnprepareResourcesRequest{Claims: reqClaims})
		if err != nil {
			return nil, fmt.Errorf("NodeUnprepareResources on %s: %w", endpoint, err)
		}
		for _, c := range claims {
			res := kubeletClaimResult{Claim: c}
			if r, ok := resp.Claims[c.UID]; !ok {
				res.Error = "driver returned no result for this claim"
			} else {
				res.Error = r.Error
			}
			rep.Claims = append(rep.Claims, res)
		}
	}
	return rep, nil
}
