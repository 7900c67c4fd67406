package cdi

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrInvalidName is matched (with errors.Is) by every error about a
// qualified device name or one of its parts. The error itself is a
// *NameError, which says which part and which character were wrong.
var ErrInvalidName = errors.New("invalid CDI device name")

// NamePart identifies the part of a qualified name "vendor/class=name" that
// an error is about.
type NamePart int

const (
	// PartQualifiedName means the shape of the whole name is wrong: a
	// separator is missing or a part is empty.
	PartQualifiedName NamePart = iota
	// PartVendor is the part before the first "/".
	PartVendor
	// PartClass is the part between the first "/" and the first "=".
	PartClass
	// PartDevice is the part after the first "=".
	PartDevice
)

func (p NamePart) String() string {
	switch p {
	case PartVendor:
		return "vendor"
	case PartClass:
		return "class"
	case PartDevice:
		return "device name"
	default:
		return "qualified device name"
	}
}

// NameError describes why a name was rejected.
type NameError struct {
	// Input is the string given to the parser or validator.
	Input string
	// Part is the part of Input that is wrong.
	Part NamePart
	// Value is the text of that part ("" when it is missing).
	Value string
	// Offset is the byte offset in Value of the offending character,
	// or -1 when the problem is not a single character.
	Offset int
	// Char is the offending character (utf8.RuneError for a byte that is
	// not valid UTF-8); only meaningful when Offset >= 0.
	Char rune
	// Reason says what the rule is, e.g. "must start with a letter".
	Reason string
}

func (e *NameError) Error() string {
	var b strings.Builder
	b.WriteString("cdi: invalid ")
	if e.Part == PartQualifiedName {
		fmt.Fprintf(&b, "qualified device name %q: %s", e.Input, e.Reason)
		return b.String()
	}
	if e.Input != e.Value {
		fmt.Fprintf(&b, "qualified device name %q: ", e.Input)
	}
	fmt.Fprintf(&b, "%s %q", e.Part, e.Value)
	if e.Offset >= 0 {
		fmt.Fprintf(&b, ": character %q at offset %d", e.Char, e.Offset)
	}
	b.WriteString(" ")
	b.WriteString(e.Reason)
	return b.String()
}

// Is makes errors.Is(err, ErrInvalidName) true.
func (e *NameError) Is(target error) bool { return target == ErrInvalidName }

// Character classes, one bit each, looked up by byte. Every byte >= 0x80
// has no class: the CDI name language is ASCII only (a multi-byte UTF-8
// letter is rejected just like the reference parser rejects it).
const (
	classLetter = 1 << iota
	classDigit
	classPunct // '.', '-', '_': allowed inside vendor, class and device names
	classColon // ':': allowed inside device names only

	alnum        = classLetter | classDigit
	vendorInside = alnum | classPunct
	deviceInside = alnum | classPunct | classColon
)

var charClass = func() (t [256]uint8) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = classLetter
		t[c-'a'+'A'] = classLetter
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = classDigit
	}
	t['.'], t['-'], t['_'] = classPunct, classPunct, classPunct
	t[':'] = classColon
	return t
}()

// Reasons, shared so that the error path stays cheap and messages stay
// consistent between ParseQualifiedName and the single-part validators.
const (
	reasonEmpty        = "must not be empty"
	reasonVendorFirst  = "must be a letter (A-Z, a-z) at the start"
	reasonVendorInside = "is not allowed: only A-Z, a-z, 0-9, '.', '-' and '_' may appear inside"
	reasonDeviceFirst  = "must be a letter or digit at the start"
	reasonDeviceInside = "is not allowed: only A-Z, a-z, 0-9, '.', '-', '_' and ':' may appear inside"
	reasonLast         = "must be a letter or digit at the end"
	reasonNoEquals     = `has no "=" between the class and the device name`
	reasonNoSlash      = `has no "/" between the vendor and the class`
	reasonEmptyVendor  = "has an empty vendor"
	reasonEmptyClass   = "has an empty class"
	reasonEmptyDevice  = "has an empty device name"
	reasonEmptyName    = "is empty"
	reasonLeadingSlash = `starts with "/"; a qualified name starts with the vendor`
	reasonNoRuleBroken = "breaks a rule of the qualified-name grammar"
	reasonSecondSlash  = `is a second "/": only one may appear, between vendor and class`
	reasonSecondEquals = `is a second "=": only one may appear, between class and device name`
)

// scanVendorOrClass returns the offset of the first character that breaks
// the vendor/class rules, or -1 when s is valid. An empty s is reported at
// offset 0 with reasonEmpty; callers check emptiness first when they want
// a different message.
func scanVendorOrClass(s string) (int, string) {
	n := len(s)
	if n == 0 {
		return 0, reasonEmpty
	}
	if charClass[s[0]]&classLetter == 0 {
		return 0, reasonVendorFirst
	}
	for i := 1; i < n-1; i++ {
		if charClass[s[i]]&vendorInside == 0 {
			return i, reasonVendorInside
		}
	}
	if n > 1 && charClass[s[n-1]]&alnum == 0 {
		return n - 1, reasonLast
	}
	return -1, ""
}

// scanDevice is scanVendorOrClass for the device-name rules.
func scanDevice(s string) (int, string) {
	n := len(s)
	if n == 0 {
		return 0, reasonEmpty
	}
	if charClass[s[0]]&alnum == 0 {
		return 0, reasonDeviceFirst
	}
	for i := 1; i < n-1; i++ {
		if charClass[s[i]]&deviceInside == 0 {
			return i, reasonDeviceInside
		}
	}
	if n > 1 && charClass[s[n-1]]&alnum == 0 {
		return n - 1, reasonLast
	}
	return -1, ""
}

func partError(input string, part NamePart, value string, offset int, reason string) *NameError {
	e := &NameError{Input: input, Part: part, Value: value, Offset: offset, Reason: reason}
	if value == "" {
		e.Offset = -1
		return e
	}
	e.Char, _ = utf8.DecodeRuneInString(value[offset:])
	// Inside a multi-byte character: name the byte, not a neighbour.
	if !utf8.RuneStart(value[offset]) {
		e.Char = utf8.RuneError
	}
	return e
}

// refine turns a generic per-character reason into a more helpful one for
// separators that are misplaced rather than simply forbidden.
func refine(part NamePart, value string, offset int, reason string) string {
	if offset < 0 || offset >= len(value) {
		return reason
	}
	switch {
	case part == PartClass && value[offset] == '/':
		return reasonSecondSlash
	case part == PartDevice && value[offset] == '=':
		return reasonSecondEquals
	}
	return reason
}

// ValidateVendorName checks a vendor name: an ASCII letter, then letters,
// digits, '.', '-' or '_', ending in a letter or digit. One letter is
// enough ("a" is valid).
func ValidateVendorName(vendor string) error {
	if off, reason := scanVendorOrClass(vendor); off >= 0 {
		return partError(vendor, PartVendor, vendor, off, reason)
	}
	return nil
}

// ValidateClassName checks a class name; the rules are the vendor's.
func ValidateClassName(class string) error {
	if off, reason := scanVendorOrClass(class); off >= 0 {
		return partError(class, PartClass, class, off, reason)
	}
	return nil
}

// ValidateDeviceName checks a device name: an ASCII letter or digit, then
// letters, digits, '.', '-', '_' or ':', ending in a letter or digit.
func ValidateDeviceName(name string) error {
	if off, reason := scanDevice(name); off >= 0 {
		return partError(name, PartDevice, name, off, reason)
	}
	return nil
}

// QualifiedName joins vendor, class and device name into "vendor/class=name".
// It does not validate; use IsQualifiedName on the result, or validate the
// parts, when they come from outside.
func QualifiedName(vendor, class, name string) string {
	return vendor + "/" + class + "=" + name
}

// IsQualifiedName reports whether device parses as a valid qualified name.
func IsQualifiedName(device string) bool {
	_, _, ok := scanQualified(device)
	return ok
}

// ParseQualifiedName splits "vendor/class=name" into its parts and validates
// each of them. The vendor ends at the first "/" and the class at the first
// "="; anything after is part of the next piece (and then rejected, since
// neither "/" nor "=" may appear in a class or a device name).
//
// On error the vendor and class are empty and name is the whole input, as in
// the reference implementation, so callers that log "the name" on failure
// log what they were given. The error is a *NameError (errors.Is
// ErrInvalidName). A valid name is parsed without allocating.
func ParseQualifiedName(device string) (vendor, class, name string, err error) {
	slash, eq, ok := scanQualified(device)
	if !ok {
		return "", "", device, explainQualified(device)
	}
	return device[:slash], device[slash+1 : eq], device[eq+1:], nil
}

// scanQualified is the fast path: one pass over the bytes, returning the
// offsets of the separators when device is valid. It says nothing about
// why a name is invalid; explainQualified works that out, off the hot path.
func scanQualified(device string) (slash, eq int, ok bool) {
	n := len(device)
	// The vendor: a letter, then vendorInside bytes up to the "/" (a "/"
	// or "=" ends the loop because neither is in vendorInside).
	if n == 0 || charClass[device[0]]&classLetter == 0 {
		return 0, 0, false
	}
	i := 1
	for i < n && charClass[device[i]]&vendorInside != 0 {
		i++
	}
	if i == n || device[i] != '/' || charClass[device[i-1]]&alnum == 0 {
		return 0, 0, false
	}
	slash = i
	// The class, the same way, up to the "=".
	i++
	if i == n || charClass[device[i]]&classLetter == 0 {
		return 0, 0, false
	}
	for i++; i < n && charClass[device[i]]&vendorInside != 0; i++ {
	}
	if i == n || device[i] != '=' || charClass[device[i-1]]&alnum == 0 {
		return 0, 0, false
	}
	eq = i
	// The device name: everything after the "=".
	i++
	if i == n || charClass[device[i]]&alnum == 0 {
		return 0, 0, false
	}
	for i++; i < n; i++ {
		if charClass[device[i]]&deviceInside == 0 {
			return 0, 0, false
		}
	}
	if charClass[device[n-1]]&alnum == 0 {
		return 0, 0, false
	}
	return slash, eq, true
}

// explainQualified returns the *NameError for a name scanQualified
// rejected: the first rule it breaks, checking the shape first and then
// vendor, class and device name in turn.
func explainQualified(device string) error {
	shape := func(reason string) error {
		return &NameError{Input: device, Part: PartQualifiedName, Value: device, Offset: -1, Reason: reason}
	}
	if device == "" {
		return shape(reasonEmptyName)
	}
	if device[0] == '/' {
		return shape(reasonLeadingSlash)
	}
	eq := strings.IndexByte(device, '=')
	if eq < 0 {
		return shape(reasonNoEquals)
	}
	if eq == len(device)-1 {
		return shape(reasonEmptyDevice)
	}
	slash := strings.IndexByte(device[:eq], '/')
	switch {
	case slash < 0:
		return shape(reasonNoSlash)
	case slash == 0:
		return shape(reasonEmptyVendor)
	case slash == eq-1:
		return shape(reasonEmptyClass)
	}
	vendor, class, name := device[:slash], device[slash+1:eq], device[eq+1:]
	if off, reason := scanVendorOrClass(vendor); off >= 0 {
		return partError(device, PartVendor, vendor, off, reason)
	}
	if off, reason := scanVendorOrClass(class); off >= 0 {
		return partError(device, PartClass, class, off, refine(PartClass, class, off, reason))
	}
	if off, reason := scanDevice(name); off >= 0 {
		return partError(device, PartDevice, name, off, refine(PartDevice, name, off, reason))
	}
	// Unreachable while scanQualified and the rules above agree (a fuzz
	// target checks that they do); an error is still better than a nil.
	return shape(reasonNoRuleBroken)
}

// ParseKind splits a spec's kind "vendor/class" at the first "/" and
// validates both parts.
func ParseKind(kind string) (vendor, class string, err error) {
	slash := strings.IndexByte(kind, '/')
	if slash <= 0 || slash == len(kind)-1 {
		return "", "", &NameError{Input: kind, Part: PartQualifiedName, Value: kind, Offset: -1,
			Reason: `is not a kind: want "vendor/class" with both parts non-empty`}
	}
	vendor, class = kind[:slash], kind[slash+1:]
	if off, reason := scanVendorOrClass(vendor); off >= 0 {
		return "", "", partError(kind, PartVendor, vendor, off, reason)
	}
	if off, reason := scanVendorOrClass(class); off >= 0 {
		return "", "", partError(kind, PartClass, class, off, refine(PartClass, class, off, reason))
	}
	return vendor, class, nil
}
