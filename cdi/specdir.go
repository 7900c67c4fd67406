package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/dranode/dranode/checkpoint/durable"
)

// SpecFileMode is the mode of spec files SpecDir writes. Specs are not
// secret, and runtimes or tools running as other users read them.
const SpecFileMode fs.FileMode = 0o644

// ErrInvalidClaimUID is matched by errors for a claim UID that cannot name a
// spec file.
var ErrInvalidClaimUID = errors.New("invalid claim UID for a CDI spec file name")

// TransientSpecFileName returns the file name of the spec for one claim:
// "<vendor>-<class>_<claimUID>.json", with any "/" in claimUID replaced by
// "_", the convention runtimes and other drivers use for transient specs.
// It does not validate; SpecDir's methods do.
func TransientSpecFileName(vendor, class, claimUID string) string {
	return vendor + "-" + class + "_" + strings.ReplaceAll(claimUID, "/", "_") + ".json"
}

// ClaimClass is the CDI class of the per-claim transient specs dranode
// writes: the spec of a claim's devices from vendor V has kind "V/claim",
// and its devices are named "V/claim=<claimUID>-<device>". The agent, the
// piecemeal driver and dranodectl all use it, so each finds the others'
// specs.
const ClaimClass = "claim"

// SpecDir is a directory of CDI spec files that a runtime loads (usually
// /var/run/cdi), holding one transient spec per claim and driver.
//
// Its methods are safe for concurrent use on different claims; writing and
// removing the same claim's spec concurrently leaves one of the two results.
type SpecDir struct {
	// Path is the directory; Write creates it (mode 0755) when missing,
	// durably: the parent of each directory it creates is synced.
	Path string
	// NoSync skips the fsyncs of Write, Remove and Sweep. Readers still
	// see a spec whole or not at all (a temporary file renamed into
	// place), and a crash of the process loses nothing (the kernel holds
	// the data), but a crash of the machine may lose the latest changes or
	// leave a spec empty. Set it only for specs that are rewritten after a
	// reboot anyway: transient specs of claims whose preparation is
	// recorded durably elsewhere and redone in a new boot, in a directory
	// that is usually a tmpfs (/var/run/cdi) where fsync buys nothing.
	// The zero value is durable.
	NoSync bool
}

// Write validates spec and stores it as the transient spec of claimUID,
// replacing an earlier one. The file appears whole or not at all, and is
// durable when Write returns: it is written to a temporary file in the same
// directory, synced, renamed into place, and the directory is synced. The
// temporary file's name does not end in ".json", so runtimes never load a
// half-written spec (see NoSync for the durability it can skip). Write
// returns the file's path.
func (d SpecDir) Write(spec *Spec, claimUID string) (string, error) {
	if err := checkClaimUID(claimUID); err != nil {
		return "", err
	}
	if err := spec.Validate(); err != nil {
		return "", err
	}
	vendor, class, _ := ParseKind(spec.Kind) // valid: Validate checked it
	data, err := spec.Encode()
	if err != nil {
		return "", err
	}
	if err := d.disk().MkdirAll(d.Path, 0o755); err != nil {
		return "", fmt.Errorf("cdi: creating spec directory: %w", err)
	}
	path := filepath.Join(d.Path, TransientSpecFileName(vendor, class, claimUID))
	if err := d.disk().WriteFile(path, data, SpecFileMode); err != nil {
		return "", fmt.Errorf("cdi: writing spec: %w", err)
	}
	return path, nil
}

func checkClaimUID(uid string) error {
	switch {
	case uid == "":
		return fmt.Errorf("%w: empty", ErrInvalidClaimUID)
	case strings.ContainsRune(uid, 0):
		return fmt.Errorf("%w: %q contains a NUL byte", ErrInvalidClaimUID, uid)
	}
	return nil
}

// checkFileNameParts rejects what could make a spec file name point
// outside the directory or at another driver's files: vendor and class
// must be valid names (which contain no "/" or ".."-only forms).
func checkFileNameParts(vendor, class, claimUID string) error {
	if err := ValidateVendorName(vendor); err != nil {
		return err
	}
	if err := ValidateClassName(class); err != nil {
		return err
	}
	return checkClaimUID(claimUID)
}

// fsyncs counts the fsyncs SpecDir made, for tests of NoSync.
var fsyncs atomic.Uint64

// disk is what writes d's files and syncs its directory.
func (d SpecDir) disk() durable.Writer {
	return durable.Writer{NoSync: d.NoSync, Syncs: &fsyncs}
}

// Lookup tells whether the transient spec of claimUID for vendor/class
// exists in d, and where it is or would be. It validates the parts like
// Remove does. A missing directory means a missing spec; anything but a
// regular file under the spec's name, or failing to look, is an error.
func (d SpecDir) Lookup(vendor, class, claimUID string) (path string, exists bool, err error) {
	if err := checkFileNameParts(vendor, class, claimUID); err != nil {
		return "", false, err
	}
	path = filepath.Join(d.Path, TransientSpecFileName(vendor, class, claimUID))
	switch fi, err := os.Stat(path); {
	case errors.Is(err, fs.ErrNotExist):
		return path, false, nil
	case err != nil:
		return path, false, fmt.Errorf("cdi: looking up spec: %w", err)
	case !fi.Mode().IsRegular():
		return path, false, fmt.Errorf("cdi: looking up spec: %s is a %v, not a regular file", path, fi.Mode().Type())
	}
	return path, true, nil
}

// Remove deletes the transient spec of claimUID. A spec that does not exist
// is not an error: Unprepare may run twice, or after a reboot emptied the
// directory.
func (d SpecDir) Remove(vendor, class, claimUID string) error {
	if err := checkFileNameParts(vendor, class, claimUID); err != nil {
		return err
	}
	path := filepath.Join(d.Path, TransientSpecFileName(vendor, class, claimUID))
	switch err := os.Remove(path); {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("cdi: removing spec: %w", err)
	}
	if err := d.disk().SyncDir(d.Path); err != nil {
		return fmt.Errorf("cdi: removing spec %s: %w", path, err)
	}
	return nil
}

// Sweep removes the transient specs of vendor/class whose claim keep does
// not want, for specs leaked by a crash between writing a spec and
// recording the claim. It returns the paths it removed.
//
// It only touches files named "<vendor>-<class>_<uid>.json" whose kind is
// exactly vendor/class: because vendor names may contain "-", the name of
// "a-b"/"c" specs has the same prefix as that of "a"/"b-c" specs, so the
// file's own kind decides. Files that cannot be read as a spec are left
// alone (and named in the error), as are other drivers' files and
// temporary files. A file that disappears during the sweep is not an error.
func (d SpecDir) Sweep(vendor, class string, keep func(claimUID string) bool) (removed []string, err error) {
	if keep == nil {
		return nil, errors.New("cdi: sweeping specs: nil keep function (pass one that returns false to remove every spec of the kind)")
	}
	if err := checkFileNameParts(vendor, class, "-"); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(d.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cdi: sweeping specs: %w", err)
	}
	prefix := vendor + "-" + class + "_"
	kind := vendor + "/" + class
	var errs []error
	for _, e := range entries {
		name := e.Name()
		uid, ok := strings.CutPrefix(name, prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if uid, ok = strings.CutSuffix(uid, ".json"); !ok || uid == "" || keep(uid) {
			continue
		}
		path := filepath.Join(d.Path, name)
		fileKind, err := readKind(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cdi: sweeping specs: left %s alone: %w", path, err))
			continue
		}
		if fileKind != kind {
			continue
		}
		switch err := os.Remove(path); {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			errs = append(errs, fmt.Errorf("cdi: sweeping specs: %w", err))
		default:
			removed = append(removed, path)
		}
	}
	if len(removed) > 0 {
		if err := d.disk().SyncDir(d.Path); err != nil {
			errs = append(errs, fmt.Errorf("cdi: sweeping specs: %w", err))
		}
	}
	return removed, errors.Join(errs...)
}

// readKind reads just the kind of a spec file; the rest may be anything.
func readKind(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var head struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return "", fmt.Errorf("not a JSON spec: %w", err)
	}
	return head.Kind, nil
}
