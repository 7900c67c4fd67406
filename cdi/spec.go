package cdi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"unicode/utf8"
)

// Spec is a CDI spec file: the devices of one vendor/class ("kind") and the
// container edits that inject them. The JSON form is that of the CDI
// specification, versions 0.3.0 to 1.1.0 (see MinimumVersion for which
// fields need which version).
//
// Decoding (json.Unmarshal, DecodeSpec) is strict, as container runtimes
// are when they load a spec: an unknown field, a field spelled in another
// case, or a field given twice is an error (errors.Is ErrUnknownField or
// ErrDuplicateField) rather than being dropped, so a spec is never
// rewritten without something it contained.
//
// Encoding leaves out optional fields that are empty: a zero major or minor,
// an empty list, empty spec-level containerEdits. They mean the same as
// absent ones to every reader, and the reference library writes them the
// same way.
type Spec struct {
	Version string `json:"cdiVersion"`
	Kind    string `json:"kind"`
	// Annotations is CDI metadata, not container annotations (0.6.0).
	Annotations map[string]string `json:"annotations,omitempty"`
	Devices     []Device          `json:"devices"`
	// ContainerEdits apply whenever any device of the spec is injected.
	ContainerEdits ContainerEdits `json:"containerEdits,omitzero"`
}

// Device is one injectable device: the name after "=" in its qualified name
// and the edits that inject it.
type Device struct {
	Name string `json:"name"`
	// Annotations is CDI metadata (0.6.0).
	Annotations    map[string]string `json:"annotations,omitempty"`
	ContainerEdits ContainerEdits    `json:"containerEdits"`
}

// ContainerEdits are the changes a runtime makes to a container's OCI spec.
type ContainerEdits struct {
	// Env entries are "NAME=value".
	Env         []string     `json:"env,omitempty"`
	DeviceNodes []DeviceNode `json:"deviceNodes,omitempty"`
	// NetDevices move host network interfaces into the container (1.1.0).
	NetDevices []NetDevice `json:"netDevices,omitempty"`
	Hooks      []Hook      `json:"hooks,omitempty"`
	Mounts     []Mount     `json:"mounts,omitempty"`
	// IntelRdt sets the container's RDT class (0.7.0).
	IntelRdt *IntelRdt `json:"intelRdt,omitempty"`
	// AdditionalGIDs are added to the container process (0.7.0).
	AdditionalGIDs []uint32 `json:"additionalGids,omitempty"`
}

// DeviceNode is a device node to create in the container.
type DeviceNode struct {
	Path string `json:"path"`
	// HostPath is the node on the host when it differs from Path (0.5.0).
	HostPath string `json:"hostPath,omitempty"`
	// Type is "b", "c", "u", "p" or empty (taken from the host node).
	Type  string `json:"type,omitempty"`
	Major int64  `json:"major,omitempty"`
	Minor int64  `json:"minor,omitempty"`
	// FileMode is the mode of the node in the container.
	FileMode *os.FileMode `json:"fileMode,omitempty"`
	// Permissions are cgroup permissions: any of "rwm", or "none".
	Permissions string  `json:"permissions,omitempty"`
	UID         *uint32 `json:"uid,omitempty"`
	GID         *uint32 `json:"gid,omitempty"`
}

// Mount is a mount to add to the container.
type Mount struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath"`
	Options       []string `json:"options,omitempty"`
	// Type is the file system type (0.4.0).
	Type string `json:"type,omitempty"`
}

// Hook is an OCI hook to add to the container.
type Hook struct {
	// HookName is the OCI hook point; see HookNames.
	HookName string   `json:"hookName"`
	Path     string   `json:"path"`
	Args     []string `json:"args,omitempty"`
	Env      []string `json:"env,omitempty"`
	Timeout  *int     `json:"timeout,omitempty"`
}

// IntelRdt is the Intel RDT configuration of the container (0.7.0).
type IntelRdt struct {
	ClosID        string `json:"closID,omitempty"`
	L3CacheSchema string `json:"l3CacheSchema,omitempty"`
	MemBwSchema   string `json:"memBwSchema,omitempty"`
	// Schemata (1.1.0): a non-nil slice, even empty, needs 1.1.0, as in
	// the reference implementation.
	Schemata []string `json:"schemata,omitempty"`
	// EnableMonitoring (1.1.0).
	EnableMonitoring bool `json:"enableMonitoring,omitempty"`
}

// NetDevice moves the host network interface HostInterfaceName into the
// container under Name (1.1.0).
type NetDevice struct {
	HostInterfaceName string `json:"hostInterfaceName"`
	Name              string `json:"name"`
}

var (
	// ErrUnknownField is matched by a decoding error for a field the CDI
	// specification does not define (or spells differently).
	ErrUnknownField = errors.New("unknown field")
	// ErrNotUTF8 is matched by a decoding error for a spec that is not
	// valid UTF-8.
	ErrNotUTF8 = errors.New("not valid UTF-8")
	// ErrDuplicateField is matched by a decoding error for a field that
	// appears twice in one object.
	ErrDuplicateField = errors.New("duplicate field")
)

// DecodeError is a spec that could not be decoded: the JSON path of the
// problem and what it was.
type DecodeError struct {
	Path string
	Err  error
}

func (e *DecodeError) Error() string {
	if e.Path == "" {
		return "cdi: decoding spec: " + e.Err.Error()
	}
	return "cdi: decoding spec: " + e.Path + ": " + e.Err.Error()
}

func (e *DecodeError) Unwrap() error { return e.Err }

// DecodeSpec decodes a JSON spec strictly (see Spec). It does not validate;
// call Validate for that.
func DecodeSpec(data []byte) (*Spec, error) {
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, &DecodeError{Err: errors.New("a spec must be a JSON object")}
	}
	var s Spec
	if err := json.Unmarshal(data, &s); err != nil {
		var de *DecodeError
		if errors.As(err, &de) {
			return nil, de
		}
		return nil, &DecodeError{Err: err}
	}
	return &s, nil
}

// UnmarshalJSON decodes strictly; see Spec.
func (s *Spec) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil // the encoding/json convention: null leaves the value alone
	}
	if !utf8.Valid(data) {
		// encoding/json would quietly turn bad bytes into U+FFFD; runtimes
		// refuse the file.
		return &DecodeError{Err: ErrNotUTF8}
	}
	if err := checkFields(data); err != nil {
		return err
	}
	type plain Spec // no methods: no recursion
	var p plain
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // belt and braces; checkFields already did it exactly
	if err := dec.Decode(&p); err != nil {
		return &DecodeError{Err: err}
	}
	*s = Spec(p)
	return nil
}

// Encode returns the spec as indented JSON with a final newline, the form
// SpecDir writes.
func (s *Spec) Encode() ([]byte, error) {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("cdi: encoding spec %q: %w", s.Kind, err)
	}
	return append(data, '\n'), nil
}

// QualifiedNames returns the qualified names of the spec's devices in
// order: the CDI device IDs a driver reports to the kubelet for them. It
// fails when the kind or a device name is invalid.
func (s *Spec) QualifiedNames() ([]string, error) {
	vendor, class, err := ParseKind(s.Kind)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(s.Devices))
	for _, d := range s.Devices {
		if err := ValidateDeviceName(d.Name); err != nil {
			return nil, err
		}
		names = append(names, QualifiedName(vendor, class, d.Name))
	}
	return names, nil
}
