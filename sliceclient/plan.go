package sliceclient

import (
	"bytes"
	"crypto/sha256"
	"sort"
	"sync"
	"time"

	"github.com/dranode/dranode/inventory"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// canonical is a slice spec in a form where byte equality is semantic
// equality: the protobuf encoding (map keys sorted, quantities canonical,
// empty and nil lists alike) of everything but the devices, and of each
// device. Taint timestamps are left out; see devicesEqual.
type canonical struct {
	head    []byte
	devices [][]byte
}

func (c *canonical) equal(o *canonical) bool {
	if !bytes.Equal(c.head, o.head) || len(c.devices) != len(o.devices) {
		return false
	}
	for i := range c.devices {
		if !bytes.Equal(c.devices[i], o.devices[i]) {
			return false
		}
	}
	return true
}

func (c *canonical) sum() [sha256.Size]byte {
	h := sha256.New()
	h.Write(c.head)
	for _, d := range c.devices {
		h.Write([]byte{0})
		h.Write(d)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

func canonicalHead(spec *resourceapi.ResourceSliceSpec) []byte {
	s := *spec
	s.Devices = nil
	b, err := s.Marshal()
	if err != nil {
		// Marshal of a Go value only fails on impossible sizes; make the
		// slice compare unequal rather than panic.
		return []byte(err.Error())
	}
	return b
}

func canonicalDevice(d *resourceapi.Device) []byte {
	c := *d
	if len(d.Taints) > 0 {
		c.Taints = make([]resourceapi.DeviceTaint, len(d.Taints))
		copy(c.Taints, d.Taints)
		for i := range c.Taints {
			c.Taints[i].TimeAdded = nil
		}
	}
	b, err := c.Marshal()
	if err != nil {
		return []byte(err.Error())
	}
	return b
}

func canonicalOf(spec *resourceapi.ResourceSliceSpec) canonical {
	c := canonical{head: canonicalHead(spec), devices: make([][]byte, len(spec.Devices))}
	for i := range spec.Devices {
		c.devices[i] = canonicalDevice(&spec.Devices[i])
	}
	return c
}

// storedSlice is a slice as the API server has it, with its canonical form
// computed at most once per resourceVersion, and only when a sync compares
// it: the echo of a write, or an event that arrives before the write's
// response, need none.
type storedSlice struct {
	obj       *resourceapi.ResourceSlice
	canonOnce sync.Once
	canonical canonical
}

func newStoredSlice(obj *resourceapi.ResourceSlice) *storedSlice {
	return &storedSlice{obj: obj}
}

// canon returns the canonical form of the stored spec.
func (s *storedSlice) canon() *canonical {
	s.canonOnce.Do(func() { s.canonical = canonicalOf(&s.obj.Spec) })
	return &s.canonical
}

// on returns s for obj, a copy of s.obj at the same resourceVersion that
// the informer holds anyway, keeping the canonical form s has or will
// compute: the publisher then keeps no decoded copy of its own.
func (s *storedSlice) on(obj *resourceapi.ResourceSlice) *storedSlice {
	n := &storedSlice{obj: obj}
	n.canonOnce.Do(func() { n.canonical = *s.canon() })
	return n
}

// storedAfterWrite is newStoredSlice for the server's answer to write w.
// A device the server returned as it was sent (the usual case) reuses the
// encoding w already has instead of encoding the device again; this is on
// the path of every write.
func storedAfterWrite(got *resourceapi.ResourceSlice, w *plannedWrite) *storedSlice {
	s := &storedSlice{obj: got}
	sent := w.obj.Spec.Devices
	if len(sent) != len(got.Spec.Devices) || len(w.canon.devices) != len(sent) {
		return s // computed on demand
	}
	c := canonical{head: canonicalHead(&got.Spec), devices: make([][]byte, len(sent))}
	for k := range sent {
		// sameSimpleDevice checks the simplicity of its first argument
		// only; the server may have dropped or added fields, so both.
		if simpleDevice(&got.Spec.Devices[k]) && sameSimpleDevice(&sent[k], &got.Spec.Devices[k]) {
			// Both simple and equal: the same encoding, which for a device
			// without taints is its canonical form.
			c.devices[k] = w.canon.devices[k]
		} else {
			c.devices[k] = canonicalDevice(&got.Spec.Devices[k])
		}
	}
	s.canonOnce.Do(func() { s.canonical = c })
	return s
}

// desiredDevice is a validated device in encoded form: the publisher keeps
// its own copy as bytes, compares with them, and decodes a device only to
// write it.
type desiredDevice struct {
	name         string
	full         []byte // protobuf of the device as it is to be sent
	canon        []byte // full without taint times; see canonicalDevice
	advanced     bool
	explicitTime bool // a taint has TimeAdded set
	// dev is the publisher's own copy, kept for the cheap comparison of
	// the next inventory's device when simple.
	dev    *resourceapi.Device
	simple bool
}

// encodeDeviceAgain is encodeDevice for a device that may be unchanged
// since prev was encoded: then prev is returned and nothing is allocated.
// scratch is reused between calls.
func encodeDeviceAgain(d *resourceapi.Device, prev *desiredDevice, scratch *[]byte) desiredDevice {
	if prev == nil || prev.explicitTime || hasTaintTimes(d) {
		return encodeDevice(d)
	}
	if prev.simple && sameSimpleDevice(d, prev.dev) {
		return *prev
	}
	size := d.Size()
	if cap(*scratch) < size {
		*scratch = make([]byte, size)
	}
	buf := (*scratch)[:size]
	n, err := d.MarshalToSizedBuffer(buf)
	if err != nil || !bytes.Equal(buf[size-n:], prev.full) {
		return encodeDevice(d)
	}
	return *prev
}

func hasTaintTimes(d *resourceapi.Device) bool {
	for t := range d.Taints {
		if d.Taints[t].TimeAdded != nil {
			return true
		}
	}
	return false
}

func encodeDevice(d *resourceapi.Device) desiredDevice {
	dd := desiredDevice{name: d.Name, advanced: isAdvanced(d)}
	c := *d
	for t := range d.Taints {
		if d.Taints[t].TimeAdded != nil {
			dd.explicitTime = true
		}
	}
	if dd.explicitTime {
		// The server keeps seconds only; round a copy, never the caller's.
		c.Taints = make([]resourceapi.DeviceTaint, len(d.Taints))
		copy(c.Taints, d.Taints)
		for t := range c.Taints {
			if ta := c.Taints[t].TimeAdded; ta != nil {
				c.Taints[t].TimeAdded = &metav1.Time{Time: ta.Time.Round(time.Second)}
			}
		}
	}
	full, err := c.Marshal()
	if err != nil {
		full = []byte(err.Error())
	}
	dd.full, dd.canon = full, full
	if len(c.Taints) > 0 {
		dd.canon = canonicalDevice(&c)
	}
	dd.simple = simpleDevice(d)
	if dd.simple {
		dd.dev = d.DeepCopy()
	}
	return dd
}

func (dd *desiredDevice) decode() resourceapi.Device {
	var d resourceapi.Device
	// The bytes came from Marshal of a valid device; a failure here would be
	// a bug in the generated code, and the server would reject the result.
	_ = d.Unmarshal(dd.full)
	return d
}

// desiredPool is a validated pool with what the planner needs computed once
// per inventory update.
type desiredPool struct {
	name        string
	devices     []desiredDevice
	byName      map[string]int
	counters    []resourceapi.CounterSet
	anyAdvanced bool
}

func newDesiredPool(pool inventory.Pool) *desiredPool {
	devices := make([]desiredDevice, len(pool.Devices))
	for i := range pool.Devices {
		devices[i] = encodeDevice(&pool.Devices[i])
	}
	return newDesiredPoolEncoded(pool, devices)
}

func newDesiredPoolEncoded(pool inventory.Pool, devices []desiredDevice) *desiredPool {
	dp := &desiredPool{name: pool.Name, devices: devices, byName: make(map[string]int, len(devices))}
	for i := range devices {
		dp.byName[devices[i].name] = i
		dp.anyAdvanced = dp.anyAdvanced || devices[i].advanced
	}
	if pool.SharedCounters != nil {
		dp.counters = make([]resourceapi.CounterSet, len(pool.SharedCounters))
		for i := range pool.SharedCounters {
			pool.SharedCounters[i].DeepCopyInto(&dp.counters[i])
		}
	}
	return dp
}

// acceptance records that the server stores storedSum when sent
// desiredSum: fields it dropped or defaulted. Such a slice is up to date.
type acceptance struct {
	desiredSum, storedSum [sha256.Size]byte
}

// plannedWrite is one write with the canonical form of what was sent.
type plannedWrite struct {
	obj   *resourceapi.ResourceSlice
	canon canonical
}

// poolPlan is what one sync of a pool has to write.
type poolPlan struct {
	creates, updates []plannedWrite
	deletes          []*resourceapi.ResourceSlice
	generation       int64
	resplit          bool
}

func (p *poolPlan) empty() bool {
	return len(p.creates) == 0 && len(p.updates) == 0 && len(p.deletes) == 0
}

// Per-slice limits of the API, which the planner splits pools by.
const (
	maxDevicesPerSlice         = resourceapi.ResourceSliceMaxDevices
	maxAdvancedDevicesPerSlice = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	maxCounterSetsPerSlice     = resourceapi.ResourceSliceMaxCounterSets
)

// isAdvanced reports whether a device makes its slice subject to the lower
// device limit: taints, counter consumption or list-valued attributes.
func isAdvanced(d *resourceapi.Device) bool {
	if len(d.Taints) > 0 || len(d.ConsumesCounters) > 0 {
		return true
	}
	for _, a := range d.Attributes {
		if a.BoolValues != nil || a.IntValues != nil || a.StringValues != nil || a.VersionValues != nil {
			return true
		}
	}
	return false
}

type planner struct {
	driver, node string
	owner        metav1.OwnerReference
}

func counterSliceCount(dp *desiredPool) int {
	return (len(dp.counters) + maxCounterSetsPerSlice - 1) / maxCounterSetsPerSlice
}

func deviceLimit(advanced bool) int {
	if advanced {
		return maxAdvancedDevicesPerSlice
	}
	return maxDevicesPerSlice
}

// freshDeviceSlices is how many device slices a new split uses.
func freshDeviceSlices(dp *desiredPool, counterSlices int) int {
	n := len(dp.devices)
	limit := deviceLimit(dp.anyAdvanced)
	k := (n + limit - 1) / limit
	if k == 0 && counterSlices == 0 {
		k = 1 // an empty pool still gets a slice: "no devices" is not "no pool"
	}
	return k
}

// plan compares the desired pool (nil: the pool is gone) with the stored
// slices of that pool and returns the writes that make them equal. Devices
// stay in the slice they are stored in; only when that is impossible (a
// slice over its limit, no room for a new device, fewer slices would do, the
// counter slices changed) is the pool split anew under a new generation.
func (pl *planner) plan(poolName string, dp *desiredPool, stored []*storedSlice, accepted map[string]acceptance) *poolPlan {
	p := &poolPlan{}
	ours := make(map[int]*storedSlice, len(stored))
	var maxGen int64
	for _, s := range stored {
		idx, ok := sliceIndex(pl.node, pl.driver, poolName, s.obj.Name)
		if !ok || dp == nil {
			p.deletes = append(p.deletes, s.obj)
			continue
		}
		ours[idx] = s
		maxGen = max(maxGen, s.obj.Spec.Pool.Generation)
	}
	if dp == nil {
		return p
	}

	nCounter := counterSliceCount(dp)
	members, resplit := pl.keepLayout(dp, ours, maxGen, nCounter)
	if resplit {
		members = freshSplit(dp, nCounter)
		maxGen++
	}
	p.resplit = resplit
	p.generation = maxGen
	count := len(members)

	for i := 0; i < count; i++ {
		spec := resourceapi.ResourceSliceSpec{
			Driver:   pl.driver,
			Pool:     resourceapi.ResourcePool{Name: poolName, Generation: maxGen, ResourceSliceCount: int64(count)},
			NodeName: &pl.node,
		}
		canon := canonical{}
		if i < nCounter {
			end := min((i+1)*maxCounterSetsPerSlice, len(dp.counters))
			spec.SharedCounters = dp.counters[i*maxCounterSetsPerSlice : end]
		} else if len(members[i]) > 0 {
			canon.devices = make([][]byte, len(members[i]))
			for k, j := range members[i] {
				canon.devices[k] = dp.devices[j].canon
			}
		}
		canon.head = canonicalHead(&spec) // Devices are not part of the head
		withDevices := func() resourceapi.ResourceSliceSpec {
			if i >= nCounter && len(members[i]) > 0 {
				spec.Devices = make([]resourceapi.Device, len(members[i]))
				for k, j := range members[i] {
					if d := dp.devices[j].dev; d != nil {
						spec.Devices[k] = *d // shares maps; nothing writes to them
					} else {
						spec.Devices[k] = dp.devices[j].decode()
					}
				}
			}
			return spec
		}
		name := SliceName(pl.node, pl.driver, poolName, i)
		cur := ours[i]
		if cur == nil {
			obj := &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{pl.owner}},
				Spec:       withDevices(),
			}
			p.creates = append(p.creates, plannedWrite{obj: obj, canon: canon})
			continue
		}
		if pl.upToDate(cur, &canon, dp, members[i], accepted[name]) {
			continue
		}
		// The stored spec is replaced as a whole: copy only the metadata.
		obj := &resourceapi.ResourceSlice{TypeMeta: cur.obj.TypeMeta, ObjectMeta: *cur.obj.ObjectMeta.DeepCopy()}
		obj.OwnerReferences = []metav1.OwnerReference{pl.owner}
		obj.Spec = withDevices()
		keepTaintTimes(obj.Spec.Devices, cur.obj.Spec.Devices)
		p.updates = append(p.updates, plannedWrite{obj: obj, canon: canon})
	}
	for idx, s := range ours {
		if idx >= count {
			p.deletes = append(p.deletes, s.obj)
		}
	}
	sort.Slice(p.deletes, func(a, b int) bool { return p.deletes[a].Name < p.deletes[b].Name })
	return p
}

func (pl *planner) upToDate(cur *storedSlice, want *canonical, dp *desiredPool, members []int, acc acceptance) bool {
	refs := cur.obj.OwnerReferences
	if len(refs) != 1 || refs[0].UID != pl.owner.UID || refs[0].Name != pl.owner.Name ||
		refs[0].Kind != pl.owner.Kind || refs[0].APIVersion != pl.owner.APIVersion ||
		refs[0].Controller == nil || !*refs[0].Controller {
		return false
	}
	if !cur.canon().equal(want) {
		return acc != (acceptance{}) && acc.desiredSum == want.sum() && acc.storedSum == cur.canon().sum()
	}
	// Taint times the driver chose itself must match too.
	for k, j := range members {
		if !dp.devices[j].explicitTime {
			continue
		}
		wantTaints, gotTaints := dp.devices[j].decode().Taints, cur.obj.Spec.Devices[k].Taints
		for t := range wantTaints {
			w, g := wantTaints[t].TimeAdded, gotTaints[t].TimeAdded
			if w != nil && (g == nil || !w.Equal(g)) {
				return false
			}
		}
	}
	return true
}

// keepTaintTimes copies the server-set TimeAdded of stored taints into
// desired taints that leave it unset, so an update does not reset it.
func keepTaintTimes(desired, stored []resourceapi.Device) {
	if len(stored) == 0 {
		return
	}
	var byName map[string]*resourceapi.Device
	for i := range desired {
		d := &desired[i]
		if len(d.Taints) == 0 {
			continue
		}
		if byName == nil {
			byName = make(map[string]*resourceapi.Device, len(stored))
			for k := range stored {
				byName[stored[k].Name] = &stored[k]
			}
		}
		old := byName[d.Name]
		if old == nil {
			continue
		}
		taints := make([]resourceapi.DeviceTaint, len(d.Taints))
		copy(taints, d.Taints)
		for t := range taints {
			if taints[t].TimeAdded != nil {
				continue
			}
			for _, o := range old.Taints {
				if o.Key == taints[t].Key && o.Value == taints[t].Value && o.Effect == taints[t].Effect {
					taints[t].TimeAdded = o.TimeAdded
					break
				}
			}
		}
		d.Taints = taints
	}
}

// keepLayout assigns the devices to the slices they are stored in and new
// devices to slices with room. It returns resplit when that is not possible
// or not good enough.
func (pl *planner) keepLayout(dp *desiredPool, ours map[int]*storedSlice, gen int64, nCounter int) ([][]int, bool) {
	if len(ours) == 0 {
		return nil, true
	}
	count := -1
	for idx, s := range ours {
		c := int(s.obj.Spec.Pool.ResourceSliceCount)
		if s.obj.Spec.Pool.Generation != gen || (count >= 0 && c != count) || idx >= c {
			return nil, true
		}
		count = c
		if isCounterSlice := len(s.obj.Spec.SharedCounters) > 0; isCounterSlice != (idx < nCounter) {
			return nil, true
		}
	}
	nDevSlices := count - nCounter
	if nDevSlices < 0 || nDevSlices > freshDeviceSlices(dp, nCounter) && nDevSlices > 0 {
		return nil, true
	}
	where := make(map[string]int)
	for idx, s := range ours {
		if idx < nCounter {
			continue
		}
		for k := range s.obj.Spec.Devices {
			where[s.obj.Spec.Devices[k].Name] = idx
		}
	}
	members := make([][]int, count)
	advanced := make([]bool, count)
	var unplaced []int
	for j := range dp.devices {
		idx, ok := where[dp.devices[j].name]
		if !ok {
			unplaced = append(unplaced, j)
			continue
		}
		members[idx] = append(members[idx], j)
		advanced[idx] = advanced[idx] || dp.devices[j].advanced
	}
	for idx := nCounter; idx < count; idx++ {
		if len(members[idx]) > deviceLimit(advanced[idx]) {
			return nil, true
		}
	}
	for _, j := range unplaced {
		best := -1
		for idx := nCounter; idx < count; idx++ {
			if len(members[idx])+1 > deviceLimit(advanced[idx] || dp.devices[j].advanced) {
				continue
			}
			if best < 0 || len(members[idx]) < len(members[best]) {
				best = idx
			}
		}
		if best < 0 {
			return nil, true
		}
		members[best] = append(members[best], j)
		advanced[best] = advanced[best] || dp.devices[j].advanced
	}
	if len(unplaced) > 0 {
		for idx := nCounter; idx < count; idx++ {
			sort.Ints(members[idx])
		}
	}
	return members, false
}

// freshSplit spreads the devices evenly, in order, over as few slices as the
// limits allow, after the counter slices. Even spreading leaves room in
// every slice for devices that come later.
func freshSplit(dp *desiredPool, nCounter int) [][]int {
	k := freshDeviceSlices(dp, nCounter)
	members := make([][]int, nCounter+k)
	n := len(dp.devices)
	next := 0
	for t := 0; t < k; t++ {
		size := n / k
		if t < n%k {
			size++
		}
		m := make([]int, size)
		for i := range m {
			m[i] = next
			next++
		}
		members[nCounter+t] = m
	}
	return members
}
