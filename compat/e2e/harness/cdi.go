package harness

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// ErrUnresolved means a CDI ID the kubelet would hand the runtime does not
// resolve in the reference CDI library.
var ErrUnresolved = errors.New("CDI devices do not resolve")

// ResolveCDI loads every spec in dir with the reference CDI library, as a
// container runtime would, and injects ids into an empty OCI spec. It
// returns the resulting spec; any unresolved ID or spec error is an error
// naming it.
func ResolveCDI(dir string, ids []string) (*oci.Spec, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: no CDI IDs", ErrUnresolved)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI cache on %s: %w", dir, err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		var msgs []string
		for path, es := range errs {
			for _, e := range es {
				msgs = append(msgs, path+": "+e.Error())
			}
		}
		sort.Strings(msgs)
		return nil, fmt.Errorf("CDI specs in %s have errors: %s", dir, strings.Join(msgs, "; "))
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	unresolved, err := cache.InjectDevices(spec, ids...)
	if len(unresolved) > 0 {
		return nil, fmt.Errorf("%w: %v (%v)", ErrUnresolved, unresolved, err)
	}
	if err != nil {
		return nil, fmt.Errorf("inject CDI devices %v: %w", ids, err)
	}
	return spec, nil
}
