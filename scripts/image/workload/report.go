package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Schema identifies the report's format; it is the value of [Report.Schema].
// A change that removes or renames a field gets a new schema.
const Schema = "dranode.workload/v1"

// ErrNoReport is returned by [Parse] when no line of its input is a report.
var ErrNoReport = errors.New("workload: no report in the output")

// Report is what the workload program saw when it started. Every list is
// sorted (environment by name, devices by path, mounts in mountinfo order,
// which is the kernel's order of mounting), so two reports of the same
// container compare equal.
type Report struct {
	// Schema is always [Schema].
	Schema string `json:"schema"`
	// Env is the process environment, sorted by name.
	Env []EnvVar `json:"env"`
	// Devices are the character and block device nodes under /dev (symbolic
	// links are not followed), sorted by path.
	Devices []Device `json:"devices"`
	// Mounts are the process's mounts from /proc/self/mountinfo.
	Mounts []Mount `json:"mounts"`
	// Errors are the parts of /dev or mountinfo that could not be read; a
	// report never leaves something out silently.
	Errors []string `json:"errors,omitempty"`
	// Block is the block device probe's outcome, when the program was
	// asked for one ([BlockEnv]); nil otherwise.
	Block *Block `json:"block,omitempty"`
	// Files are the files the program was asked to read ([FilesEnv]),
	// sorted by path; nil otherwise.
	Files []File `json:"files,omitempty"`
}

// EnvVar is one environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Device types.
const (
	CharDevice  = "char"
	BlockDevice = "block"
)

// Device is one device node.
type Device struct {
	// Path is absolute, as the container sees it (e.g. /dev/gpu0).
	Path string `json:"path"`
	// Type is [CharDevice] or [BlockDevice].
	Type  string `json:"type"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

// Mount is one mount of the process's mount namespace.
type Mount struct {
	// MountPoint is absolute, as the container sees it.
	MountPoint string `json:"mountPoint"`
	// Source is the mount source (a device, "overlay", "tmpfs", ...).
	Source string `json:"source"`
	// FSType is the file system type, with any subtype ("fuse.sshfs").
	FSType string `json:"fsType"`
	// Root is the path inside the source file system that is mounted (a
	// bind mount of a file or directory shows the host path here when the
	// source is the host's root file system).
	Root string `json:"root"`
}

// File returns the file read at path.
func (r Report) File(path string) (File, bool) {
	for _, f := range r.Files {
		if f.Path == path {
			return f, true
		}
	}
	return File{}, false
}

// Getenv returns the value of the environment variable name and whether it
// was set.
func (r Report) Getenv(name string) (string, bool) {
	for _, e := range r.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// Device returns the device node at path (e.g. "/dev/gpu0").
func (r Report) Device(path string) (Device, bool) {
	for _, d := range r.Devices {
		if d.Path == path {
			return d, true
		}
	}
	return Device{}, false
}

// MountAt returns the last mount at mountPoint: the one the container sees
// when several are stacked there.
func (r Report) MountAt(mountPoint string) (Mount, bool) {
	for i := len(r.Mounts) - 1; i >= 0; i-- {
		if r.Mounts[i].MountPoint == mountPoint {
			return r.Mounts[i], true
		}
	}
	return Mount{}, false
}

// Marshal returns the report as the program prints it: one line of JSON
// with no trailing newline.
func (r Report) Marshal() ([]byte, error) {
	return json.Marshal(r)
}

// WriteText writes a human-readable form of the report, one item a line;
// [Parse] ignores these lines.
func (r Report) WriteText(w io.Writer) error {
	var b bytes.Buffer
	for _, e := range r.Env {
		fmt.Fprintf(&b, "env %s=%s\n", e.Name, e.Value)
	}
	for _, d := range r.Devices {
		fmt.Fprintf(&b, "device %s %s %d:%d\n", d.Path, d.Type, d.Major, d.Minor)
	}
	for _, m := range r.Mounts {
		fmt.Fprintf(&b, "mount %s %s %s %s\n", m.MountPoint, m.Source, m.FSType, m.Root)
	}
	for _, f := range r.Files {
		fmt.Fprintf(&b, "file %s %d bytes %s\n", f.Path, len(f.Content), f.Error)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "error %s\n", e)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// Parse finds the report in a program's output, such as a container log: the
// first line that is a JSON object whose schema is [Schema]. Other lines are
// skipped. It returns [ErrNoReport] when there is none, and an error naming
// the line when the report line does not decode.
func Parse(out []byte) (Report, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if !bytes.HasPrefix(line, []byte("{")) {
			continue
		}
		var probe struct {
			Schema string `json:"schema"`
		}
		if json.Unmarshal(line, &probe) != nil || probe.Schema != Schema {
			continue
		}
		var r Report
		if err := json.Unmarshal(line, &r); err != nil {
			return Report{}, fmt.Errorf("workload: line %d: %w", n, err)
		}
		return r, nil
	}
	if err := sc.Err(); err != nil {
		return Report{}, fmt.Errorf("workload: reading output: %w", err)
	}
	return Report{}, ErrNoReport
}

// envFrom turns os.Environ's NAME=value strings into sorted variables.
func envFrom(environ []string) []EnvVar {
	vars := make([]EnvVar, 0, len(environ))
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		vars = append(vars, EnvVar{Name: name, Value: value})
	}
	sort.SliceStable(vars, func(i, j int) bool { return vars[i].Name < vars[j].Name })
	return vars
}
