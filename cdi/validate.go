package cdi

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalidSpec is matched (with errors.Is) by the error Validate returns;
// that error is a *SpecError listing every problem.
var ErrInvalidSpec = errors.New("invalid CDI spec")

var hookNames = []string{"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}

// HookNames returns the hook points a Hook may name (the OCI hook points).
func HookNames() []string { return append([]string(nil), hookNames...) }

// SpecProblem is one thing wrong with a spec, at a JSON path such as
// "devices[2].containerEdits.deviceNodes[0].type".
type SpecProblem struct {
	Path    string
	Message string
}

func (p SpecProblem) String() string { return p.Path + ": " + p.Message }

// SpecError is a spec that failed validation, with all of its problems in
// the order they appear in the spec.
type SpecError struct {
	Kind     string
	Problems []SpecProblem
}

func (e *SpecError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cdi: invalid spec %q: ", e.Kind)
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// Is makes errors.Is(err, ErrInvalidSpec) true.
func (e *SpecError) Is(target error) bool { return target == ErrInvalidSpec }

type problems []SpecProblem

func (ps *problems) add(path, format string, args ...any) {
	*ps = append(*ps, SpecProblem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Validate checks the spec by the rules container runtimes apply when they
// load it (those of the CDI reference implementation v1.1.1):
//
//   - cdiVersion is a released version (a leading "v" is allowed) and at
//     least MinimumVersion(s);
//   - kind is "vendor/class" with a valid vendor and class;
//   - there is at least one device; device names are valid and unique;
//     every device has at least one edit;
//   - env entries are "NAME=value" with a non-empty NAME; device nodes have
//     a path, a type of "", b, c, u or p, and permissions of "", "none" or
//     letters from "rwm"; hooks have a known HookName and a path; mounts
//     have both paths; net devices have both names, none repeated within
//     one set of edits; an intelRdt closID is a valid file name or "/".
//
// Annotation keys are not checked, because the reference accepts any.
// It returns nil or a *SpecError with every problem found.
func (s *Spec) Validate() error {
	var ps problems
	if versionRank(s.Version) < 0 {
		ps.add("cdiVersion", "%q is not a released CDI version (%s)", s.Version, strings.Join(knownVersions, ", "))
	} else if need := MinimumVersion(s); versionRank(s.Version) < versionRank(need) {
		ps.add("cdiVersion", "%q is too old for the features this spec uses: need at least %s", s.Version, need)
	}
	if _, _, err := ParseKind(s.Kind); err != nil {
		ps.add("kind", "%s", strings.TrimPrefix(err.Error(), "cdi: "))
	}
	validateEdits(&ps, "containerEdits", &s.ContainerEdits)
	if len(s.Devices) == 0 {
		ps.add("devices", "a spec needs at least one device")
	}
	seen := make(map[string]int, len(s.Devices))
	for i := range s.Devices {
		d := &s.Devices[i]
		path := "devices[" + strconv.Itoa(i) + "]"
		if err := ValidateDeviceName(d.Name); err != nil {
			ps.add(path+".name", "%s", strings.TrimPrefix(err.Error(), "cdi: "))
		}
		if first, dup := seen[d.Name]; dup {
			ps.add(path+".name", "%q is already the name of devices[%d]", d.Name, first)
		} else {
			seen[d.Name] = i
		}
		if d.ContainerEdits.isEmpty() {
			ps.add(path+".containerEdits", "a device needs at least one edit")
		}
		validateEdits(&ps, path+".containerEdits", &d.ContainerEdits)
	}
	if len(ps) > 0 {
		return &SpecError{Kind: s.Kind, Problems: ps}
	}
	return nil
}

// IsZero reports whether the edits change nothing. It makes encoding leave
// out empty spec-level edits even when they hold empty, non-nil lists, so
// that encoding a decoded spec gives the same bytes every time.
func (e ContainerEdits) IsZero() bool { return e.isEmpty() }

func (e *ContainerEdits) isEmpty() bool {
	return len(e.Env) == 0 && len(e.DeviceNodes) == 0 && len(e.Hooks) == 0 && len(e.Mounts) == 0 &&
		len(e.AdditionalGIDs) == 0 && e.IntelRdt == nil && len(e.NetDevices) == 0
}

func validateEnv(ps *problems, path string, env []string) {
	for i, v := range env {
		if strings.IndexByte(v, '=') <= 0 {
			ps.add(path+"["+strconv.Itoa(i)+"]", "%q is not NAME=value with a non-empty NAME", v)
		}
	}
}

func validateEdits(ps *problems, path string, e *ContainerEdits) {
	validateEnv(ps, path+".env", e.Env)
	for i, n := range e.DeviceNodes {
		p := path + ".deviceNodes[" + strconv.Itoa(i) + "]"
		if n.Path == "" {
			ps.add(p+".path", "must not be empty")
		}
		switch n.Type {
		case "", "b", "c", "u", "p":
		default:
			ps.add(p+".type", "%q is not one of b, c, u, p (or empty)", n.Type)
		}
		if n.Permissions != "" && n.Permissions != "none" && strings.Trim(n.Permissions, "rwm") != "" {
			ps.add(p+".permissions", `%q is neither "none" nor made of r, w and m`, n.Permissions)
		}
	}
	for i, h := range e.Hooks {
		p := path + ".hooks[" + strconv.Itoa(i) + "]"
		if !knownHook(h.HookName) {
			ps.add(p+".hookName", "%q is not one of %s", h.HookName, strings.Join(hookNames, ", "))
		}
		if h.Path == "" {
			ps.add(p+".path", "must not be empty")
		}
		validateEnv(ps, p+".env", h.Env)
	}
	for i, m := range e.Mounts {
		p := path + ".mounts[" + strconv.Itoa(i) + "]"
		if m.HostPath == "" {
			ps.add(p+".hostPath", "must not be empty")
		}
		if m.ContainerPath == "" {
			ps.add(p+".containerPath", "must not be empty")
		}
	}
	if r := e.IntelRdt; r != nil {
		switch c := r.ClosID; {
		case c == "/":
		case len(c) >= 4096, c == ".", c == "..", strings.ContainsAny(c, "/\n"):
			ps.add(path+".intelRdt.closID", "%q is not a valid file name (nor \"/\" for the root class)", c)
		}
	}
	hosts := make(map[string]int, len(e.NetDevices))
	names := make(map[string]int, len(e.NetDevices))
	for i, d := range e.NetDevices {
		p := path + ".netDevices[" + strconv.Itoa(i) + "]"
		if d.HostInterfaceName == "" {
			ps.add(p+".hostInterfaceName", "must not be empty")
		} else if first, dup := hosts[d.HostInterfaceName]; dup {
			ps.add(p+".hostInterfaceName", "%q is already moved by netDevices[%d]", d.HostInterfaceName, first)
		} else {
			hosts[d.HostInterfaceName] = i
		}
		if d.Name == "" {
			ps.add(p+".name", "must not be empty")
		} else if first, dup := names[d.Name]; dup {
			ps.add(p+".name", "%q is already used by netDevices[%d]", d.Name, first)
		} else {
			names[d.Name] = i
		}
	}
}

func knownHook(name string) bool {
	for _, h := range hookNames {
		if h == name {
			return true
		}
	}
	return false
}
