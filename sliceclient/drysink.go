package sliceclient

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/dranode/dranode/checkpoint/durable"
	"github.com/dranode/dranode/inventory"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// DryRun names the node and driver for WriteDir.
type DryRun struct {
	DriverName string
	NodeName   string
	// NodeUID, when set, goes into the owner reference; without it the
	// slices have none (there is no Node to point at).
	NodeUID types.UID
}

// Slices returns the ResourceSlices a new publisher would create for inv:
// each pool split afresh at generation 1, in pool order, then slice order.
func (d DryRun) Slices(inv inventory.Inventory) ([]*resourceapi.ResourceSlice, error) {
	if err := checkDriverName(d.DriverName); err != nil {
		return nil, err
	}
	if err := checkNodeName(d.NodeName); err != nil {
		return nil, err
	}
	if err := inventory.Validate(inv); err != nil {
		return nil, err
	}
	pl := planner{driver: d.DriverName, node: d.NodeName, owner: metav1.OwnerReference{
		APIVersion: "v1", Kind: "Node", Name: d.NodeName, UID: d.NodeUID, Controller: ptrTo(true),
	}}
	var out []*resourceapi.ResourceSlice
	for _, pool := range inv.DeepCopy().Pools {
		plan := pl.plan(pool.Name, newDesiredPool(pool), nil, nil)
		for _, w := range plan.creates {
			w.obj.TypeMeta = metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"}
			if d.NodeUID == "" {
				w.obj.OwnerReferences = nil
			}
			out = append(out, w.obj)
		}
	}
	return out, nil
}

// WriteDir writes one YAML file per slice of inv to dir (created if
// missing), named after the slice, each durably with mode 0644
// (checkpoint/durable: a temporary file, synced, renamed, the directory
// synced). Files of this node and driver from an earlier call
// that are no longer wanted are removed; other files are left alone. It
// returns the paths written. An invalid inventory writes nothing.
func (d DryRun) WriteDir(dir string, inv inventory.Inventory) ([]string, error) {
	slices, err := d.Slices(inv)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sliceclient: dry run directory: %w", err)
	}
	keep := map[string]bool{}
	var paths []string
	for _, s := range slices {
		data, err := yaml.Marshal(s)
		if err != nil {
			return paths, fmt.Errorf("sliceclient: encoding ResourceSlice %s: %w", s.Name, err)
		}
		path := filepath.Join(dir, s.Name+".yaml")
		if err := durable.WriteFile(path, data, 0o644); err != nil {
			return paths, fmt.Errorf("sliceclient: dry run: %w", err)
		}
		keep[path] = true
		paths = append(paths, path)
	}
	stale, err := d.staleFiles(dir, keep)
	if err != nil {
		return paths, err
	}
	for _, path := range stale {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return paths, fmt.Errorf("sliceclient: removing stale dry-run file: %w", err)
		}
	}
	// The removals above are durable only once the directory is synced.
	if err := durable.SyncDir(dir); err != nil {
		return paths, fmt.Errorf("sliceclient: dry run: %w", err)
	}
	return paths, nil
}

// staleFiles are YAML files in dir holding a ResourceSlice of this node and
// driver that is not in keep. Files that do not parse as one are not ours.
func (d DryRun) staleFiles(dir string, keep map[string]bool) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("sliceclient: listing dry-run directory: %w", err)
	}
	sort.Strings(matches)
	var stale []string
	for _, path := range matches {
		if keep[path] {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("sliceclient: reading %s: %w", path, err)
		}
		var s resourceapi.ResourceSlice
		if yaml.Unmarshal(data, &s) != nil || s.Kind != "ResourceSlice" {
			continue
		}
		if s.Spec.Driver == d.DriverName && s.Spec.NodeName != nil && *s.Spec.NodeName == d.NodeName {
			stale = append(stale, path)
		}
	}
	return stale, nil
}
