package loop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/inventory"
)

// DefaultDriverName is the driver name when none is configured.
const DefaultDriverName = "loop.example.com"

// maxDevices bounds numDevices: each device is a file on the node's disk
// and, once attached, one of the kernel's loop devices (8 exist by default).
const maxDevices = 64

// errConfig marks a configuration the driver cannot use.
var errConfig = errors.New("invalid loop plugin configuration")

// duration accepts Go duration strings ("500ms") in JSON.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"1s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

// Config is the driver's section of the agent configuration (JSON keys as
// in the agent's YAML). Every field has a default.
type Config struct {
	// DriverName is the DRA driver name; default loop.example.com.
	DriverName string `json:"driverName"`
	// NumDevices is how many loop-backed disks the driver offers, 0..64;
	// default 2.
	NumDevices *int `json:"numDevices"`
	// Size is each disk's size, a quantity; default 16Mi. A multiple of
	// 512 bytes, the loop device's sector.
	Size string `json:"size"`
	// StateDir holds the backing files disk-N.img, which the driver owns;
	// default /var/lib/dranode/loop. In a container it must be mounted at
	// the same path as on the host: the kernel names a loop device's
	// backing file by the attaching process's path.
	StateDir string `json:"stateDir"`
	// LoopControl is the loop control device; default /dev/loop-control.
	LoopControl string `json:"loopControl"`
	// DevDir holds the loop device nodes (loopN); default /dev.
	DevDir string `json:"devDir"`
	// SysfsRoot is where sysfs is mounted; default /sys.
	SysfsRoot string `json:"sysfsRoot"`
	// LoopDevices, when set, are the only loop devices (N of loopN) the
	// driver attaches to, so that an operator can keep others for the
	// host; by default any free one (LOOP_CTL_GET_FREE).
	LoopDevices []int `json:"loopDevices"`
	// ContainerDevDir is where the disks appear in a container, as
	// disk-N; default /dev/<driverName>.
	ContainerDevDir string `json:"containerDevDir"`
	// HealthPollInterval is how often sysfs is read for health and
	// inventory changes; default 1s.
	HealthPollInterval duration `json:"healthPollInterval"`

	size resource.Quantity
}

// ParseConfig reads and checks the driver's configuration, filling in
// defaults.
func ParseConfig(raw []byte) (Config, error) {
	var c Config
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return Config{}, fmt.Errorf("%w: %v", errConfig, err)
		}
	}
	if c.DriverName == "" {
		c.DriverName = DefaultDriverName
	}
	if c.NumDevices == nil {
		c.NumDevices = ptr.To(2)
	}
	if c.Size == "" {
		c.Size = "16Mi"
	}
	if c.StateDir == "" {
		c.StateDir = "/var/lib/dranode/loop"
	}
	if c.LoopControl == "" {
		c.LoopControl = "/dev/loop-control"
	}
	if c.DevDir == "" {
		c.DevDir = "/dev"
	}
	if c.SysfsRoot == "" {
		c.SysfsRoot = "/sys"
	}
	if c.ContainerDevDir == "" {
		c.ContainerDevDir = "/dev/" + c.DriverName
	}
	if c.HealthPollInterval == 0 {
		c.HealthPollInterval = duration(time.Second)
	}
	if err := inventory.ValidateDriverName(c.DriverName); err != nil {
		return Config{}, fmt.Errorf("%w: %w", errConfig, err)
	}
	if *c.NumDevices < 0 || *c.NumDevices > maxDevices {
		return Config{}, fmt.Errorf("%w: numDevices %d is outside 0..%d", errConfig, *c.NumDevices, maxDevices)
	}
	q, err := resource.ParseQuantity(c.Size)
	if err != nil || q.Sign() <= 0 || q.Value()%512 != 0 || q.Value() > 1<<40 {
		return Config{}, fmt.Errorf("%w: size %q is not a positive multiple of 512 bytes up to 1Ti", errConfig, c.Size)
	}
	c.size = q
	for name, p := range map[string]string{"stateDir": c.StateDir, "loopControl": c.LoopControl, "devDir": c.DevDir, "sysfsRoot": c.SysfsRoot, "containerDevDir": c.ContainerDevDir} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return Config{}, fmt.Errorf("%w: %s %q must be an absolute, clean path", errConfig, name, p)
		}
	}
	for _, n := range c.LoopDevices {
		if n < 0 || n >= 1<<20 {
			return Config{}, fmt.Errorf("%w: loopDevices: %d is not a loop device number", errConfig, n)
		}
	}
	if c.HealthPollInterval < 0 {
		return Config{}, fmt.Errorf("%w: healthPollInterval must be positive", errConfig)
	}
	return c, nil
}
