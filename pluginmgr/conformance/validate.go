package conformance

import (
	"fmt"
	"regexp"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dranode/dranode/inventory"
)

// Limits of the resource.k8s.io/v1 API.
const (
	maxAttributesAndCapacities = 32
	maxIDLength                = 32
	maxDomainLength            = 63
	maxDriverNameLength        = 63
	maxPoolNameLength          = 252
	maxAttributeValueLength    = 64
	maxCounterSets             = 8
	maxCountersPerSet          = 32
	maxConsumesCounters        = 2
)

var (
	cIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// Semantic version 2.0.0, as the API checks version attributes.
	semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)
)

// ValidateDriverName checks a driver name: a DNS subdomain of at most 63
// characters.
func ValidateDriverName(name string) []string {
	var errs []string
	if name == "" {
		return []string{"driver name is empty"}
	}
	if len(name) > maxDriverNameLength {
		errs = append(errs, fmt.Sprintf("driver name %q is longer than %d characters", name, maxDriverNameLength))
	}
	for _, e := range validation.IsDNS1123Subdomain(strings.ToLower(name)) {
		errs = append(errs, fmt.Sprintf("driver name %q: %s", name, e))
	}
	if strings.ToLower(name) != name {
		errs = append(errs, fmt.Sprintf("driver name %q must be lower case", name))
	}
	return errs
}

// ValidatePoolName checks a pool name: DNS subdomains separated by slashes,
// at most 252 characters.
func ValidatePoolName(name string) []string {
	if name == "" {
		return []string{"pool name is empty"}
	}
	var errs []string
	if len(name) > maxPoolNameLength {
		errs = append(errs, fmt.Sprintf("pool name %q is longer than %d characters", name, maxPoolNameLength))
	}
	for _, part := range strings.Split(name, "/") {
		for _, e := range validation.IsDNS1123Subdomain(part) {
			errs = append(errs, fmt.Sprintf("pool name %q, segment %q: %s", name, part, e))
		}
	}
	return errs
}

// ValidateQualifiedName checks an attribute or capacity key: a C identifier
// of at most 32 characters, optionally prefixed by a DNS subdomain of at most
// 63 characters and a slash.
func ValidateQualifiedName(name resourcev1.QualifiedName) []string {
	s := string(name)
	domain, id, hasDomain := strings.Cut(s, "/")
	if !hasDomain {
		id, domain = s, ""
	}
	var errs []string
	if hasDomain {
		if domain == "" {
			errs = append(errs, fmt.Sprintf("name %q: empty domain before '/'", s))
		} else {
			if len(domain) > maxDomainLength {
				errs = append(errs, fmt.Sprintf("name %q: domain longer than %d characters", s, maxDomainLength))
			}
			for _, e := range validation.IsDNS1123Subdomain(domain) {
				errs = append(errs, fmt.Sprintf("name %q: domain: %s", s, e))
			}
		}
	}
	switch {
	case id == "":
		errs = append(errs, fmt.Sprintf("name %q: empty identifier", s))
	case len(id) > maxIDLength:
		errs = append(errs, fmt.Sprintf("name %q: identifier longer than %d characters", s, maxIDLength))
	case !cIdentifier.MatchString(id):
		errs = append(errs, fmt.Sprintf("name %q: identifier %q is not a C identifier", s, id))
	}
	return errs
}

// ValidateAttribute checks that exactly one value is set and that it is
// within the API's limits.
func ValidateAttribute(name resourcev1.QualifiedName, a resourcev1.DeviceAttribute) []string {
	set := 0
	var errs []string
	if a.IntValue != nil {
		set++
	}
	if a.BoolValue != nil {
		set++
	}
	if a.StringValue != nil {
		set++
		if len(*a.StringValue) > maxAttributeValueLength {
			errs = append(errs, fmt.Sprintf("attribute %q: string value longer than %d characters", name, maxAttributeValueLength))
		}
	}
	if a.VersionValue != nil {
		set++
		if len(*a.VersionValue) > maxAttributeValueLength {
			errs = append(errs, fmt.Sprintf("attribute %q: version value longer than %d characters", name, maxAttributeValueLength))
		}
		if !semver.MatchString(*a.VersionValue) {
			errs = append(errs, fmt.Sprintf("attribute %q: version %q is not a semantic version", name, *a.VersionValue))
		}
	}
	if set != 1 {
		errs = append(errs, fmt.Sprintf("attribute %q: exactly one of int, bool, string or version must be set, found %d", name, set))
	}
	return errs
}

// ValidateInventory checks every pool and device of an inventory for the
// given driver and returns one message per problem, each naming the pool
// and device.
func ValidateInventory(inv inventory.Inventory) []string {
	var errs []string
	pools := map[string]bool{}
	for _, pool := range inv.Pools {
		errs = append(errs, ValidatePoolName(pool.Name)...)
		if pools[pool.Name] {
			errs = append(errs, fmt.Sprintf("pool %q published twice", pool.Name))
		}
		pools[pool.Name] = true
		for _, e := range validatePool(pool) {
			errs = append(errs, fmt.Sprintf("pool %q: %s", pool.Name, e))
		}
	}
	return errs
}

func validatePool(pool inventory.Pool) []string {
	var errs []string
	counters := map[string]map[string]bool{}
	if len(pool.SharedCounters) > maxCounterSets {
		errs = append(errs, fmt.Sprintf("%d shared counter sets, at most %d allowed", len(pool.SharedCounters), maxCounterSets))
	}
	for _, cs := range pool.SharedCounters {
		for _, e := range validation.IsDNS1123Label(cs.Name) {
			errs = append(errs, fmt.Sprintf("counter set %q: %s", cs.Name, e))
		}
		if counters[cs.Name] != nil {
			errs = append(errs, fmt.Sprintf("counter set %q defined twice", cs.Name))
		}
		if len(cs.Counters) == 0 {
			errs = append(errs, fmt.Sprintf("counter set %q has no counters", cs.Name))
		}
		if len(cs.Counters) > maxCountersPerSet {
			errs = append(errs, fmt.Sprintf("counter set %q has %d counters, at most %d allowed", cs.Name, len(cs.Counters), maxCountersPerSet))
		}
		names := map[string]bool{}
		for name := range cs.Counters {
			for _, e := range validation.IsDNS1123Label(name) {
				errs = append(errs, fmt.Sprintf("counter set %q, counter %q: %s", cs.Name, name, e))
			}
			names[name] = true
		}
		counters[cs.Name] = names
	}
	if len(pool.Devices) == 0 && len(pool.SharedCounters) == 0 {
		errs = append(errs, "pool has neither devices nor shared counters")
	}
	seen := map[string]bool{}
	for _, d := range pool.Devices {
		if seen[d.Name] {
			errs = append(errs, fmt.Sprintf("device %q published twice", d.Name))
		}
		seen[d.Name] = true
		for _, e := range validateDevice(d, counters) {
			errs = append(errs, fmt.Sprintf("device %q: %s", d.Name, e))
		}
	}
	return errs
}

func validateDevice(d resourcev1.Device, counters map[string]map[string]bool) []string {
	var errs []string
	errs = append(errs, validation.IsDNS1123Label(d.Name)...)
	if n := len(d.Attributes) + len(d.Capacity); n > maxAttributesAndCapacities {
		errs = append(errs, fmt.Sprintf("%d attributes and capacities, at most %d allowed", n, maxAttributesAndCapacities))
	}
	for name, a := range d.Attributes {
		errs = append(errs, ValidateQualifiedName(name)...)
		errs = append(errs, ValidateAttribute(name, a)...)
	}
	for name, c := range d.Capacity {
		errs = append(errs, ValidateQualifiedName(name)...)
		if c.Value.Sign() < 0 {
			errs = append(errs, fmt.Sprintf("capacity %q is negative (%s)", name, c.Value.String()))
		}
	}
	if len(d.ConsumesCounters) > maxConsumesCounters {
		errs = append(errs, fmt.Sprintf("consumes %d counter sets, at most %d allowed", len(d.ConsumesCounters), maxConsumesCounters))
	}
	for _, cc := range d.ConsumesCounters {
		known, ok := counters[cc.CounterSet]
		if !ok {
			errs = append(errs, fmt.Sprintf("consumes counter set %q, which the pool does not define", cc.CounterSet))
			continue
		}
		for name := range cc.Counters {
			if !known[name] {
				errs = append(errs, fmt.Sprintf("consumes counter %q of set %q, which the set does not define", name, cc.CounterSet))
			}
		}
	}
	return errs
}
