package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dranode/dranode/tools/envtest/childproc"
)

// SimulatedGPU is device ("gpu-N") of a simulated GPU driver (gpu-plugin,
// the piecemeal driver) whose health markers (gpuN.unhealthy) are in Dir,
// the driver's devRoot.
type SimulatedGPU struct{ Dir, Device string }

// SimulatedGPUEnv is the environment variable in which the simulated GPU
// drivers give a container the UUID of device ("gpu-N") of driver:
// GPU_DEVICE_<driver in upper case, other characters than letters and
// digits as "_">_<N>, per driver (examples/gpu and the piecemeal driver
// document it).
func SimulatedGPUEnv(driver, device string) string {
	upper := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, driver)
	return "GPU_DEVICE_" + upper + "_" + strings.TrimPrefix(device, "gpu-")
}

// MarkUnhealthy puts the mark in each device's driver's devRoot that makes
// the simulated GPU drivers refuse to prepare it and report it unhealthy;
// unmark removes the marks.
func MarkUnhealthy(devices ...SimulatedGPU) (unmark func() error, err error) {
	var marks []string
	unmark = func() error {
		var errs []error
		for _, m := range marks {
			errs = append(errs, os.Remove(m))
		}
		return errors.Join(errs...)
	}
	for _, d := range devices {
		mark := filepath.Join(d.Dir, strings.Replace(d.Device, "gpu-", "gpu", 1)) + ".unhealthy"
		if err := os.WriteFile(mark, nil, 0o644); err != nil {
			return nil, errors.Join(fmt.Errorf("marking %s unhealthy: %w", d.Device, err), unmark())
		}
		marks = append(marks, mark)
	}
	return unmark, nil
}

// EmptyDir removes everything in dir, as a reboot empties a tmpfs such as
// /var/run (and the CDI specs in it).
func EmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Process is the restartable child of tools/envtest/childproc, shared with
// the other harnesses.
type Process = childproc.Restartable

// ErrProcessExited is returned when a Process ended while the harness
// waited for it to do something.
var ErrProcessExited = childproc.ErrExited
