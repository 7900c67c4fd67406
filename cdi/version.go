package cdi

import "strings"

// CurrentVersion is the newest CDI specification version this package knows.
const CurrentVersion = "1.1.0"

// EarliestVersion is the oldest version MinimumVersion returns: no spec
// needs less than 0.3.0, the first version runtimes still load.
const EarliestVersion = "0.3.0"

// knownVersions are the released specification versions, oldest first.
// 0.1.0 and 0.2.0 are known but always too old: every spec needs at least
// EarliestVersion, as in the reference implementation.
var knownVersions = []string{"0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"}

// KnownVersions returns the released specification versions, oldest first.
func KnownVersions() []string { return append([]string(nil), knownVersions...) }

// versionRank is the position of v (with an optional leading "v") in
// knownVersions, or -1 when it is not a released version.
func versionRank(v string) int {
	v = strings.TrimPrefix(v, "v")
	for i, known := range knownVersions {
		if known == v {
			return i
		}
	}
	return -1
}

// MinimumVersion returns the oldest specification version that has every
// feature the spec uses, for its cdiVersion field:
//
//   - 1.1.0: netDevices; intelRdt.schemata (even empty) or enableMonitoring
//   - 0.7.0: intelRdt; additionalGids
//   - 0.6.0: annotations on the spec or a device; a "." in the class
//   - 0.5.0: a device name starting with a digit; deviceNodes[].hostPath
//   - 0.4.0: mounts[].type
//   - otherwise 0.3.0 (1.0.0 and 0.8.0 added no fields).
//
// It looks at every device. The reference implementation v1.1.1 looks only
// at the last device for mount types and host paths (a loop-variable bug in
// its specs-go module), so for a spec with such a field in an earlier
// device it returns an older version than this function does, and loads
// specs that declare that older version; Validate rejects them.
func MinimumVersion(s *Spec) string {
	all := func(f func(*ContainerEdits) bool) bool {
		if f(&s.ContainerEdits) {
			return true
		}
		for i := range s.Devices {
			if f(&s.Devices[i].ContainerEdits) {
				return true
			}
		}
		return false
	}
	switch {
	case all(func(e *ContainerEdits) bool {
		return len(e.NetDevices) > 0 || (e.IntelRdt != nil && (e.IntelRdt.Schemata != nil || e.IntelRdt.EnableMonitoring))
	}):
		return "1.1.0"
	case all(func(e *ContainerEdits) bool { return e.IntelRdt != nil || len(e.AdditionalGIDs) > 0 }):
		return "0.7.0"
	case needsV060(s):
		return "0.6.0"
	case startsWithDigit(s.Devices) || all(func(e *ContainerEdits) bool {
		for _, n := range e.DeviceNodes {
			if n.HostPath != "" {
				return true
			}
		}
		return false
	}):
		return "0.5.0"
	case all(func(e *ContainerEdits) bool {
		for _, m := range e.Mounts {
			if m.Type != "" {
				return true
			}
		}
		return false
	}):
		return "0.4.0"
	}
	return EarliestVersion
}

func needsV060(s *Spec) bool {
	if len(s.Annotations) > 0 {
		return true
	}
	for _, d := range s.Devices {
		if len(d.Annotations) > 0 {
			return true
		}
	}
	_, class, found := strings.Cut(s.Kind, "/")
	return found && strings.Contains(class, ".")
}

func startsWithDigit(devices []Device) bool {
	for _, d := range devices {
		if d.Name != "" && d.Name[0] >= '0' && d.Name[0] <= '9' {
			return true
		}
	}
	return false
}
