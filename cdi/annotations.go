package cdi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// AnnotationPrefix starts every container annotation key that asks the
// runtime to inject CDI devices.
const AnnotationPrefix = "cdi.k8s.io/"

// MaxAnnotationNameLength is the longest name part (after AnnotationPrefix)
// of an annotation key: the Kubernetes limit for a qualified name.
const MaxAnnotationNameLength = 63

// shortIDHexDigits is how much of the SHA-256 a ShortDeviceID keeps: 64
// bits, so two claims of one driver on one node collide with negligible
// probability, while leaving 46 characters of the key for the driver name.
const shortIDHexDigits = 16

// ErrInvalidAnnotation is matched (with errors.Is) by every error about an
// annotation key or value; the error is an *AnnotationError.
var ErrInvalidAnnotation = errors.New("invalid CDI annotation")

// AnnotationError describes an annotation key that cannot be built or an
// annotation that cannot be parsed.
type AnnotationError struct {
	// Key is the annotation key concerned, or the name part that was being
	// built into one.
	Key string
	// Reason says what is wrong.
	Reason string
	// Err is the underlying error, e.g. a *NameError for a bad device in
	// an annotation value; nil when there is none.
	Err error
}

func (e *AnnotationError) Error() string {
	msg := fmt.Sprintf("cdi: annotation %q: %s", e.Key, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is makes errors.Is(err, ErrInvalidAnnotation) true.
func (e *AnnotationError) Is(target error) bool { return target == ErrInvalidAnnotation }

// Unwrap returns the underlying error, so errors.As finds a *NameError.
func (e *AnnotationError) Unwrap() error { return e.Err }

// AnnotationKey returns the annotation key for the devices that driverName
// injects under deviceID (for DRA: the claim UID): "cdi.k8s.io/" +
// driverName + "_" + deviceID, with any "/" in deviceID replaced by "_".
// The part after the prefix must be at most MaxAnnotationNameLength
// characters, start and end with a letter or digit, and contain only
// letters, digits, '-', '_' and '.'.
//
// A driver name of 27 characters or more plus a 36-character claim UID
// does not fit; use ClaimAnnotationKey, which falls back to ShortDeviceID.
func AnnotationKey(driverName, deviceID string) (string, error) {
	if driverName == "" {
		return "", &AnnotationError{Key: AnnotationPrefix, Reason: "driver name is empty"}
	}
	if deviceID == "" {
		return "", &AnnotationError{Key: AnnotationPrefix + driverName + "_", Reason: "device ID is empty"}
	}
	name := driverName + "_" + strings.ReplaceAll(deviceID, "/", "_")
	if len(name) > MaxAnnotationNameLength {
		return "", &AnnotationError{Key: AnnotationPrefix + name, Reason: fmt.Sprintf(
			"name part is %d characters, longer than %d (use ClaimAnnotationKey for a short, stable key)",
			len(name), MaxAnnotationNameLength)}
	}
	if err := checkAnnotationName(name); err != nil {
		return "", err
	}
	return AnnotationPrefix + name, nil
}

func checkAnnotationName(name string) error {
	bad := func(i int, rule string) error {
		return &AnnotationError{Key: AnnotationPrefix + name,
			Reason: fmt.Sprintf("character %q at offset %d of the name part %s", name[i], i, rule)}
	}
	n := len(name)
	if charClass[name[0]]&alnum == 0 {
		return bad(0, "must be a letter or digit at the start")
	}
	for i := 1; i < n-1; i++ {
		if charClass[name[i]]&vendorInside == 0 {
			return bad(i, "is not allowed: only A-Z, a-z, 0-9, '.', '-' and '_' may appear")
		}
	}
	if charClass[name[n-1]]&alnum == 0 {
		return bad(n-1, "must be a letter or digit at the end")
	}
	return nil
}

// ShortDeviceID returns a device ID for AnnotationKey derived from a hash
// of driverName and claimUID: 16 lowercase hex digits, the same on every
// call and every node, different for different claims (64 bits of
// SHA-256).
func ShortDeviceID(driverName, claimUID string) string {
	h := sha256.New()
	h.Write([]byte(driverName))
	h.Write([]byte{0}) // keeps ("ab","c") and ("a","bc") apart
	h.Write([]byte(claimUID))
	return hex.EncodeToString(h.Sum(nil))[:shortIDHexDigits]
}

// ClaimAnnotationKey returns the annotation key for a claim's devices from
// driverName: AnnotationKey(driverName, claimUID) when that fits, and
// otherwise a key that always fits, from the first characters of
// driverName and ShortDeviceID(driverName, claimUID). The key is stable
// (the same inputs give the same key, so a restarted kubelet or agent
// computes it again) and unique per driver and claim.
func ClaimAnnotationKey(driverName, claimUID string) (string, error) {
	if driverName == "" || claimUID == "" || len(driverName)+1+len(claimUID) <= MaxAnnotationNameLength {
		return AnnotationKey(driverName, claimUID)
	}
	prefix := driverName
	if limit := MaxAnnotationNameLength - 1 - shortIDHexDigits; len(prefix) > limit {
		prefix = prefix[:limit]
	}
	// The name part may not end in punctuation before the "_".
	prefix = strings.TrimRight(prefix, ".-_")
	if prefix == "" {
		return "", &AnnotationError{Key: AnnotationPrefix + driverName, Reason: "driver name has no letter or digit to start the key with"}
	}
	return AnnotationKey(prefix, ShortDeviceID(driverName, claimUID))
}

// AnnotationValue joins qualified device names into an annotation value,
// separated by ",". Every name must be valid; an empty list is an error
// because the runtime would reject the empty value.
func AnnotationValue(devices []string) (string, error) {
	if len(devices) == 0 {
		return "", &AnnotationError{Reason: "no devices for the annotation value"}
	}
	for _, d := range devices {
		if _, _, _, err := ParseQualifiedName(d); err != nil {
			return "", &AnnotationError{Reason: "bad device in annotation value", Err: err}
		}
	}
	return strings.Join(devices, ","), nil
}

// UpdateAnnotations adds the annotation for devices injected by driverName
// under deviceID to annotations (allocating the map when nil) and returns
// it. It refuses to overwrite an existing key. On error annotations is
// returned unchanged.
func UpdateAnnotations(annotations map[string]string, driverName, deviceID string, devices []string) (map[string]string, error) {
	key, err := AnnotationKey(driverName, deviceID)
	if err != nil {
		return annotations, err
	}
	if _, taken := annotations[key]; taken {
		return annotations, &AnnotationError{Key: key, Reason: "key is already set"}
	}
	value, err := AnnotationValue(devices)
	if err != nil {
		err.(*AnnotationError).Key = key
		return annotations, err
	}
	if annotations == nil {
		annotations = make(map[string]string, 1)
	}
	annotations[key] = value
	return annotations, nil
}

// ParseAnnotations returns the keys starting with AnnotationPrefix and the
// devices they ask for. Other annotations are ignored. Keys come back
// sorted; devices sorted and without duplicates, so the result does not
// depend on map order. A device that is not a valid qualified name is an
// error naming its key.
func ParseAnnotations(annotations map[string]string) (keys, devices []string, err error) {
	for key := range annotations {
		if strings.HasPrefix(key, AnnotationPrefix) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		for d := range strings.SplitSeq(annotations[key], ",") {
			if _, _, _, err := ParseQualifiedName(d); err != nil {
				return nil, nil, &AnnotationError{Key: key, Reason: "bad device in annotation value", Err: err}
			}
			devices = append(devices, d)
		}
	}
	slices.Sort(devices)
	return keys, slices.Compact(devices), nil
}
