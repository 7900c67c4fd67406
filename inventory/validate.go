package inventory

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrInvalid is matched (errors.Is) by every error of this package that
// rejects an inventory or a driver name.
var ErrInvalid = errors.New("invalid inventory")

// Problem is one thing wrong with an inventory, at a field path such as
// pools[0].devices[3].attributes["gpu.example.com/model"].
type Problem struct {
	Field  string
	Reason string
}

func (p Problem) String() string { return p.Field + ": " + p.Reason }

// ValidationError lists everything wrong with an inventory. It matches
// ErrInvalid with errors.Is.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	const shown = 5
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d problem(s): ", ErrInvalid, len(e.Problems))
	for i, p := range e.Problems {
		if i == shown {
			fmt.Fprintf(&b, "; and %d more", len(e.Problems)-shown)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

func (e *ValidationError) Unwrap() error { return ErrInvalid }

// maxAttrKeyLength is the longest attribute or capacity name the API takes:
// a domain, a slash and an identifier.
const maxAttrKeyLength = resourceapi.DeviceMaxDomainLength + 1 + resourceapi.DeviceMaxIDLength

// The server's semver check (semver.org 2.0.0).
var semverPattern = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?` +
	`(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$`)

type problems []Problem

func (ps *problems) add(field, format string, args ...any) {
	*ps = append(*ps, Problem{Field: field, Reason: fmt.Sprintf(format, args...)})
}

func (ps *problems) addAll(field string, msgs []string) {
	for _, m := range msgs {
		ps.add(field, "%s", m)
	}
}

func (ps problems) err() error {
	if len(ps) == 0 {
		return nil
	}
	return &ValidationError{Problems: ps}
}

// ValidateDriverName reports whether name can be a DRA driver name (a
// ResourceSlice's spec.driver): a DNS subdomain of at most 63 characters.
// The error is a *ValidationError with the field "driverName".
func ValidateDriverName(name string) error {
	var ps problems
	switch {
	case name == "":
		ps.add("driverName", "must not be empty")
	case len(name) > resourceapi.DriverNameMaxLength:
		ps.add("driverName", "%q is longer than %d characters", name, resourceapi.DriverNameMaxLength)
	default:
		// The name is quoted: the caller chose it and should see what was
		// wrong, not only where.
		for _, m := range validation.IsDNS1123Subdomain(name) {
			ps.add("driverName", "%q: %s", name, m)
		}
	}
	return ps.err()
}

// Validate checks inv against the rules the API server applies to
// ResourceSlices, plus the ones it cannot check across slices (unique pool,
// device and counter set names, counters consumed from existing sets). What
// it accepts, the API server accepts when published in slices within the
// per-slice limits. The error is a *ValidationError naming every problem.
func Validate(inv Inventory) error {
	return ValidateIncremental(inv, nil)
}

// ValidateIncremental is Validate for an inventory of which some devices
// are already known to be valid: unchanged(pool, device), the indexes into
// inv.Pools and that pool's Devices, reports a device equal to one that
// passed validation before, and such a device gets only the checks that
// involve other parts of its pool (unique names, counter references). A nil
// unchanged checks everything. It exists for callers that validate every
// new copy of a mostly unchanged inventory and already know, cheaply,
// which devices are unchanged.
func ValidateIncremental(inv Inventory, unchanged func(pool, device int) bool) error {
	var ps problems
	pools := make(map[string]int, len(inv.Pools))
	for i, pool := range inv.Pools {
		f := fmt.Sprintf("pools[%d]", i)
		validatePoolName(&ps, f+".name", pool.Name)
		if j, dup := pools[pool.Name]; dup {
			ps.add(f+".name", "duplicate pool name %q (also pools[%d])", pool.Name, j)
		}
		pools[pool.Name] = i
		var skip func(int) bool
		if unchanged != nil {
			skip = func(j int) bool { return unchanged(i, j) }
		}
		validatePool(&ps, f, pool, skip)
	}
	return ps.err()
}

func validatePoolName(ps *problems, field, name string) {
	if name == "" {
		ps.add(field, "must not be empty")
		return
	}
	if len(name) > resourceapi.PoolNameMaxLength {
		ps.add(field, "longer than %d characters", resourceapi.PoolNameMaxLength)
	}
	for _, part := range strings.Split(name, "/") {
		ps.addAll(field, validation.IsDNS1123Subdomain(part))
	}
}

// validatePool checks a pool; devices for which skip returns true are
// known to be valid on their own (unchanged since they were validated) and
// only get the checks that involve other parts of the pool.
func validatePool(ps *problems, f string, pool Pool, skip func(int) bool) {
	counterSets := make(map[string]map[string]bool, len(pool.SharedCounters))
	for i, cs := range pool.SharedCounters {
		cf := fmt.Sprintf("%s.sharedCounters[%d]", f, i)
		if cs.Name == "" {
			ps.add(cf+".name", "must not be empty")
		} else {
			ps.addAll(cf+".name", validation.IsDNS1123Label(cs.Name))
		}
		if _, dup := counterSets[cs.Name]; dup {
			ps.add(cf+".name", "duplicate counter set name %q", cs.Name)
		}
		if len(cs.Counters) == 0 {
			ps.add(cf+".counters", "must not be empty")
		}
		if len(cs.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
			ps.add(cf+".counters", "%d counters, at most %d allowed", len(cs.Counters), resourceapi.ResourceSliceMaxCountersPerCounterSet)
		}
		names := make(map[string]bool, len(cs.Counters))
		for name := range cs.Counters {
			ps.addAll(fmt.Sprintf("%s.counters[%q]", cf, name), validation.IsDNS1123Label(name))
			names[name] = true
		}
		counterSets[cs.Name] = names
	}
	devices := make(map[string]int, len(pool.Devices))
	v := deviceValidator{ps: ps}
	for i := range pool.Devices {
		d := &pool.Devices[i]
		df := func() string { return fmt.Sprintf("%s.devices[%d]", f, i) }
		if j, dup := devices[d.Name]; dup {
			ps.add(df()+".name", "duplicate device name %q (also devices[%d])", d.Name, j)
		}
		devices[d.Name] = i
		if skip == nil || !skip(i) {
			v.device(df, d)
		}
		if len(d.ConsumesCounters) > 0 {
			validateCounterRefs(ps, df(), d, counterSets)
		}
	}
}

// deviceValidator checks devices of one pool. Field paths are formatted
// only for a problem found, and attribute names and version strings, which
// repeat across a pool's devices, are checked once each: an inventory is
// validated on every start, and a pool's first validation sits on the path
// to its first write (sliceclient's BENCHMARKS.md, first-publish cost).
type deviceValidator struct {
	ps *problems
	// Names and versions already found valid.
	okNames    map[resourceapi.QualifiedName]struct{}
	okVersions map[string]struct{}
}

// path is a field path formatted on demand.
type path func() string

func (p path) child(suffix string) path { return func() string { return p() + suffix } }

func (v *deviceValidator) device(f path, d *resourceapi.Device) {
	ps := v.ps
	switch {
	case d.Name == "":
		ps.add(f()+".name", "must not be empty")
	case !isDNSLabel(d.Name):
		ps.addAll(f()+".name", validation.IsDNS1123Label(d.Name))
	}
	if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		ps.add(f(), "%d attributes and capacities, at most %d allowed together", n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	}
	values := 0
	for name, attr := range d.Attributes {
		af := func() string { return fmt.Sprintf("%s.attributes[%q]", f(), name) }
		v.qualifiedName(af, name)
		values += v.attribute(af, attr)
	}
	if values > resourceapi.ResourceSliceMaxAttributeValuesPerDevice {
		ps.add(f()+".attributes", "%d attribute values, at most %d allowed", values, resourceapi.ResourceSliceMaxAttributeValuesPerDevice)
	}
	multi := d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
	for name, c := range d.Capacity {
		cf := func() string { return fmt.Sprintf("%s.capacity[%q]", f(), name) }
		v.qualifiedName(cf, name)
		if c.Value.Sign() < 0 {
			ps.add(cf()+".value", "must not be negative")
		}
		if c.RequestPolicy != nil {
			if !multi {
				ps.add(cf()+".requestPolicy", "allowMultipleAllocations must be true")
			} else {
				validateRequestPolicy(ps, cf, c.Value, c.RequestPolicy)
			}
		}
	}
	if len(d.Taints) > resourceapi.DeviceTaintsMaxLength {
		ps.add(f()+".taints", "%d taints, at most %d allowed", len(d.Taints), resourceapi.DeviceTaintsMaxLength)
	}
	for i, t := range d.Taints {
		tf := fmt.Sprintf("%s.taints[%d]", f(), i)
		ps.addAll(tf+".key", validation.IsQualifiedName(t.Key))
		if t.Value != "" {
			ps.addAll(tf+".value", validation.IsValidLabelValue(t.Value))
		}
		switch t.Effect {
		case resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone:
		case "":
			ps.add(tf+".effect", "must not be empty")
		default:
			ps.add(tf+".effect", "unsupported effect %q", t.Effect)
		}
	}
	if len(d.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
		ps.add(f()+".consumesCounters", "%d entries, at most %d allowed", len(d.ConsumesCounters), resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice)
	}
	if d.NodeName != nil || d.NodeSelector != nil || d.AllNodes != nil {
		ps.add(f(), "per-device node selection (nodeName, nodeSelector, allNodes) is not supported for node-local slices")
	}
	if len(d.BindingConditions) > resourceapi.BindingConditionsMaxSize {
		ps.add(f()+".bindingConditions", "at most %d allowed", resourceapi.BindingConditionsMaxSize)
	}
	if len(d.BindingFailureConditions) > resourceapi.BindingFailureConditionsMaxSize {
		ps.add(f()+".bindingFailureConditions", "at most %d allowed", resourceapi.BindingFailureConditionsMaxSize)
	}
	if (len(d.BindingConditions) == 0) != (len(d.BindingFailureConditions) == 0) {
		ps.add(f(), "bindingConditions and bindingFailureConditions must be set together")
	}
}

// isDNSLabel is the DNS-1123 label rule (validation.IsDNS1123Label: 1 to 63
// of a-z, 0-9 and '-', starting and ending alphanumeric) without a regular
// expression; the caller asks validation.IsDNS1123Label for the messages
// when it says no.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > validation.DNS1123LabelMaxLength || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// qualifiedName checks an attribute or capacity name, once per name.
func (v *deviceValidator) qualifiedName(f path, name resourceapi.QualifiedName) {
	if _, ok := v.okNames[name]; ok {
		return
	}
	before := len(*v.ps)
	validateQualifiedName(v.ps, f, string(name))
	remember(&v.okNames, name, len(*v.ps) == before)
}

// remember adds a name or version found valid to the set of those not to
// check again.
func remember[K comparable](set *map[K]struct{}, key K, valid bool) {
	if !valid {
		return
	}
	if *set == nil {
		*set = map[K]struct{}{}
	}
	(*set)[key] = struct{}{}
}

func validateQualifiedName(ps *problems, f path, name string) {
	if len(name) > maxAttrKeyLength {
		ps.add(f(), "name longer than %d characters", maxAttrKeyLength)
	}
	domain, id, hasDomain := strings.Cut(name, "/")
	if !hasDomain {
		id, domain = domain, ""
	} else {
		namePart(ps, f, "domain", domain, resourceapi.DeviceMaxDomainLength, validation.IsDNS1123Subdomain)
		if strings.Contains(id, "/") {
			ps.add(f(), "more than one \"/\"")
			return
		}
	}
	namePart(ps, f, "identifier", id, resourceapi.DeviceMaxIDLength, validation.IsCIdentifier)
}

// namePart checks the domain or the identifier of a qualified name.
func namePart(ps *problems, f path, what, value string, maxLen int, check func(string) []string) {
	switch {
	case value == "":
		ps.add(f(), "the %s must not be empty", what)
	case len(value) > maxLen:
		ps.add(f(), "%s %q longer than %d characters", what, value, maxLen)
	default:
		addAll(ps, f, check(value))
	}
}

// addAll is problems.addAll with the path formatted only if msgs is not empty.
func addAll(ps *problems, f path, msgs []string) {
	if len(msgs) > 0 {
		ps.addAll(f(), msgs)
	}
}

// attribute returns how many values the attribute counts for.
func (v *deviceValidator) attribute(f path, a resourceapi.DeviceAttribute) int {
	ps := v.ps
	set := 0
	values := 1
	if a.BoolValue != nil {
		set++
	}
	if a.IntValue != nil {
		set++
	}
	if a.StringValue != nil {
		set++
		if len(*a.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
			ps.add(f()+".string", "longer than %d characters", resourceapi.DeviceAttributeMaxValueLength)
		}
	}
	if a.VersionValue != nil {
		set++
		v.version(f.child(".version"), *a.VersionValue)
	}
	list := func(name string, n int, isSet bool) {
		if !isSet {
			return
		}
		set++
		// The API server of this release rejects list values unless the
		// alpha feature gate is on; refusing them here keeps the promise
		// that what passes validation is accepted.
		ps.add(f()+"."+name, "list-valued attributes need the alpha DRAListTypeAttributes feature gate and are not supported")
		if n == 0 {
			ps.add(f()+"."+name, "must not be empty if set")
		} else {
			values = n
		}
	}
	list("bools", len(a.BoolValues), a.BoolValues != nil)
	list("ints", len(a.IntValues), a.IntValues != nil)
	list("strings", len(a.StringValues), a.StringValues != nil)
	list("versions", len(a.VersionValues), a.VersionValues != nil)
	for i, s := range a.StringValues {
		if len(s) > resourceapi.DeviceAttributeMaxValueLength {
			ps.add(fmt.Sprintf("%s.strings[%d]", f(), i), "longer than %d characters", resourceapi.DeviceAttributeMaxValueLength)
		}
	}
	for i, s := range a.VersionValues {
		v.version(func() string { return fmt.Sprintf("%s.versions[%d]", f(), i) }, s)
	}
	if set != 1 {
		ps.add(f(), "exactly one value must be set, found %d", set)
	}
	return values
}

// version checks a version value, once per string.
func (v *deviceValidator) version(f path, s string) {
	if _, ok := v.okVersions[s]; ok {
		return
	}
	before := len(*v.ps)
	if !semverPattern.MatchString(s) {
		v.ps.add(f(), "%q is not a semantic version (semver.org 2.0.0)", s)
	}
	if len(s) > resourceapi.DeviceAttributeMaxValueLength {
		v.ps.add(f(), "longer than %d characters", resourceapi.DeviceAttributeMaxValueLength)
	}
	remember(&v.okVersions, s, len(*v.ps) == before)
}

// validateCounterRefs checks what a device consumes against the pool's
// counter sets.
func validateCounterRefs(ps *problems, f string, d *resourceapi.Device, counterSets map[string]map[string]bool) {
	seen := map[string]bool{}
	for i, cc := range d.ConsumesCounters {
		cf := fmt.Sprintf("%s.consumesCounters[%d]", f, i)
		set, ok := counterSets[cc.CounterSet]
		switch {
		case cc.CounterSet == "":
			ps.add(cf+".counterSet", "must not be empty")
		case !ok:
			ps.add(cf+".counterSet", "no counter set %q in the pool's SharedCounters", cc.CounterSet)
		case seen[cc.CounterSet]:
			ps.add(cf+".counterSet", "counter set %q consumed twice", cc.CounterSet)
		}
		seen[cc.CounterSet] = true
		if len(cc.Counters) == 0 {
			ps.add(cf+".counters", "must not be empty")
		}
		for name := range cc.Counters {
			if ok && !set[name] {
				ps.add(fmt.Sprintf("%s.counters[%q]", cf, name), "counter set %q has no counter %q", cc.CounterSet, name)
			}
		}
	}
}

// capacityRequestPolicyMaxValues is the most validValues a capacity's
// request policy may list (CapacityRequestPolicyDiscreteMaxOptions of the
// API server's internal types, not exported by k8s.io/api).
const capacityRequestPolicyMaxValues = 10

// validateRequestPolicy checks the request policy of a consumable capacity
// as the v1.37 API server does with its alpha DRAFractionalCapacityRange
// gate off: one of validValues (sorted, unique, at most 10, none above the
// capacity, the default among them) and validRange (min, max and default
// within the capacity and each other; default and max a whole number of
// steps above min), with a default whenever either is set. Fractional
// values in a range, which the server reads rounded, are refused.
func validateRequestPolicy(ps *problems, f path, capacity resource.Quantity, p *resourceapi.CapacityRequestPolicy) {
	pf := func() string { return f() + ".requestPolicy" }
	if len(p.ValidValues) > 0 && p.ValidRange != nil {
		ps.add(pf(), "validValues and validRange must not both be set")
		return
	}
	if (len(p.ValidValues) > 0 || p.ValidRange != nil) && p.Default == nil {
		ps.add(pf()+".default", "required when validValues or validRange is set")
		return
	}
	if p.Default != nil && p.Default.Sign() < 0 {
		ps.add(pf()+".default", "must not be negative")
	}
	if n := len(p.ValidValues); n > 0 {
		if n > capacityRequestPolicyMaxValues {
			ps.add(pf()+".validValues", "%d values, at most %d allowed", n, capacityRequestPolicyMaxValues)
		}
		found := false
		for i, q := range p.ValidValues {
			if i > 0 && p.ValidValues[i-1].Cmp(q) >= 0 {
				ps.add(fmt.Sprintf("%s.validValues[%d]", pf(), i), "values must be unique and sorted in ascending order")
			}
			if q.Cmp(capacity) > 0 {
				ps.add(fmt.Sprintf("%s.validValues[%d]", pf(), i), "%s is larger than the capacity %s", q.String(), capacity.String())
			}
			found = found || q.Cmp(*p.Default) == 0
		}
		if !found {
			ps.add(pf()+".default", "%s is not one of validValues", p.Default.String())
		}
	}
	r := p.ValidRange
	if r == nil {
		return
	}
	rf := func(field string) string { return pf() + ".validRange." + field }
	if r.Min == nil {
		ps.add(rf("min"), "required when validRange is set")
		return
	}
	bounds := map[string]*resource.Quantity{"default": p.Default, "min": r.Min, "max": r.Max, "step": r.Step}
	for _, name := range []string{"default", "min", "max", "step"} {
		q := bounds[name]
		if q == nil {
			continue
		}
		if q.Sign() < 0 || q.CmpInt64(math.MaxInt64) > 0 {
			ps.add(rf(name), "%s is outside 0 to %d", q.String(), int64(math.MaxInt64))
			return
		}
		if q.Cmp(*resource.NewQuantity(q.Value(), q.Format)) != 0 {
			ps.add(rf(name), "%s is fractional (needs the alpha DRAFractionalCapacityRange feature gate; not supported)", q.String())
			return
		}
	}
	if r.Min.Cmp(capacity) > 0 {
		ps.add(rf("min"), "%s is larger than the capacity %s", r.Min.String(), capacity.String())
	}
	if p.Default.Cmp(*r.Min) < 0 {
		ps.add(pf()+".default", "%s is less than min %s", p.Default.String(), r.Min.String())
	}
	if r.Max != nil {
		if r.Min.Cmp(*r.Max) > 0 {
			ps.add(rf("max"), "min %s is larger than max %s", r.Min.String(), r.Max.String())
		}
		if r.Max.Cmp(capacity) > 0 {
			ps.add(rf("max"), "%s is larger than the capacity %s", r.Max.String(), capacity.String())
		}
		if p.Default.Cmp(*r.Max) > 0 {
			ps.add(pf()+".default", "%s is more than max %s", p.Default.String(), r.Max.String())
		}
	}
	if r.Step == nil {
		return
	}
	step := r.Step.Value()
	if step <= 0 {
		ps.add(rf("step"), "must be greater than zero")
		return
	}
	added := r.Min.DeepCopy()
	added.Add(*r.Step)
	if added.Cmp(capacity) > 0 {
		ps.add(rf("step"), "min %s plus one step %s is larger than the capacity %s", r.Min.String(), r.Step.String(), capacity.String())
	}
	for _, name := range []string{"default", "max"} {
		if q := bounds[name]; q != nil && (q.Value()-r.Min.Value())%step != 0 {
			ps.add(rf("step"), "%s %s is not min %s plus a whole number of steps %s", name, q.String(), r.Min.String(), r.Step.String())
		}
	}
}
