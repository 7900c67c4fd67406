package claimcache

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/dranode/dranode/checkpoint"
)

// FuzzMigrateFormat0 feeds arbitrary bytes to the format 0 → 1 upgrade. It
// must either refuse them or produce a format 1 record that decodes, keeps
// every device, and says the same thing when upgraded output is re-encoded.
func FuzzMigrateFormat0(f *testing.F) {
	f.Add([]byte(`{"claimUID":"u","claimName":"n","namespace":"ns","podUIDs":["b","a","b"],"bootID":"boot","devices":[{"driverName":"d","poolName":"p","deviceName":"x","requestNames":["r"],"cdiDevices":["v.com/c=x"]}]}`))
	f.Add([]byte(`{"claimUID":"u","claimName":"n","namespace":"ns","bootID":"b","devices":[{"driverName":"z","poolName":"p","deviceName":"1"},{"driverName":"a","poolName":"p","deviceName":"2"},{"driverName":"z","poolName":"q","deviceName":"3"}]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"devices":[{}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := migrateFormat0To1(in)
		if err != nil {
			return
		}
		var r record
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("upgrade produced %s, which does not decode: %v", out, err)
		}
		var old recordFormat0
		if err := json.Unmarshal(in, &old); err != nil {
			t.Fatalf("upgrade accepted %q, which does not decode as format 0: %v", in, err)
		}
		n := 0
		for _, d := range r.Drivers {
			n += len(d.Devices)
		}
		if n != len(old.Devices) {
			t.Fatalf("upgrade kept %d of %d devices: %s", n, len(old.Devices), out)
		}
		if r.State != Prepared || !slices.IsSorted(r.PodUIDs) || !slices.IsSortedFunc(r.Drivers, func(a, b driverRecord) int {
			if a.Driver < b.Driver {
				return -1
			}
			if a.Driver > b.Driver {
				return 1
			}
			return 0
		}) {
			t.Fatalf("upgraded record not in canonical form: %s", out)
		}
		if r.check(r.UID) == nil {
			// A valid record survives a store round trip unchanged.
			again, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var back record
			if err := json.Unmarshal(again, &back); err != nil || !back.equal(&r) {
				t.Fatalf("round trip changed %+v into %+v (%v)", r, back, err)
			}
			if e := r.entry("boot"); !reflect.DeepEqual(e.Claim, r.ref()) {
				t.Fatalf("entry of %+v names %v", r, e.Claim)
			}
		}
	})
}

// FuzzRestoreRecord feeds arbitrary JSON as a stored format 1 record: check
// must refuse anything a Cache could not work with, and accept nothing that
// breaks an operation on it.
func FuzzRestoreRecord(f *testing.F) {
	f.Add([]byte(`{"namespace":"n","name":"c","uid":"u","state":"Prepared","bootID":"b","podUIDs":["p"],"drivers":[{"driver":"d","devices":[{"pool":"p","device":"x","cdiDeviceIDs":["v.com/c=x"]}]}]}`))
	f.Add([]byte(`{"namespace":"n","name":"c","uid":"u","state":"Bogus","bootID":"b"}`))
	f.Add([]byte(`{"namespace":"n","name":"c","uid":"u","state":"PrepareStarted","bootID":"b","podUIDs":["b","a"]}`))
	f.Add([]byte(`{"namespace":"n","name":"c","uid":"u","state":"Prepared","bootID":"b","drivers":[{"driver":"d","devices":[{"pool":"p","device":"x","shareID":"s1"},{"pool":"p","device":"x","shareID":"s2"},{"pool":"p","device":"y","adminAccess":true}]}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var r record
		if json.Unmarshal(in, &r) != nil || r.check("u") != nil {
			return
		}
		if !r.State.valid() || r.UID != "u" || r.Namespace == "" || r.Name == "" || r.BootID == "" {
			t.Fatalf("check accepted %+v", r)
		}
		if slices.Contains(r.PodUIDs, "zzz-new-pod") {
			return
		}
		next := r.clone()
		next.addPod("zzz-new-pod")
		next.removePod("zzz-new-pod")
		if !next.equal(&r) {
			t.Fatalf("add then remove of a new pod changed %+v into %+v", r, next)
		}
		e := r.entry(r.BootID)
		if e.Stale || e.State != r.State || len(e.PodUIDs) != len(r.PodUIDs) {
			t.Fatalf("entry %+v of %+v", e, r)
		}
	})
}

// FuzzRecoverClaims stores arbitrary JSON as the value of a change that
// follows damage in the record, so that Open's recovery has to make sense
// of it: never a panic, never an error, every entry it records passes the
// checks a restore makes, an uncertain entry is in PrepareStarted, and a
// plain reopen finds the same entries.
func FuzzRecoverClaims(f *testing.F) {
	f.Add([]byte(`{"namespace":"n","name":"b","uid":"u1","state":"Prepared","bootID":"b","podUIDs":["p"],"drivers":[{"driver":"d","devices":[{"pool":"p","device":"x"}]}]}`))
	f.Add([]byte(`{"namespace":"n","name":"a","uid":"u1","state":"Prepared","bootID":"b"}`))
	f.Add([]byte(`{"namespace":"n","name":"b","uid":"u0","state":"PrepareStarted","bootID":"b"}`))
	f.Add([]byte(`{"namespace":"n","name":"b","uid":"u1","state":"Prepared","bootID":"b","uncertain":"x"}`))
	f.Add([]byte(`{"namespace":"n","name":"b","uid":"u1","state":"UnprepareStarted","bootID":"b","drivers":[{"driver":"d","devices":[{"pool":"p","device":"ua","adminAccess":true},{"pool":"p","device":"u2"}]}]}`))
	f.Add([]byte(`"just a string"`))
	f.Fuzz(func(t *testing.T, value []byte) {
		if !json.Valid(value) {
			return
		}
		dir := t.TempDir()
		j, err := checkpoint.OpenJournal[json.RawMessage](dir, storeSchema())
		if err != nil {
			t.Fatal(err)
		}
		rec := func(uid, name, state string) json.RawMessage {
			return json.RawMessage(`{"namespace":"n","name":"` + name + `","uid":"` + uid + `","state":"` + state + `","bootID":"b","drivers":[{"driver":"d","devices":[{"pool":"p","device":"` + uid + `"}]}]}`)
		}
		for _, c := range []checkpoint.Change[json.RawMessage]{
			{Key: "ua", Value: rec("ua", "a", "Prepared")},
			{Key: "u0", Value: rec("u0", "z", "Prepared")},
			{Key: "u1", Value: value},
			{Key: "u2", Value: rec("u2", "c", "PrepareStarted")},
		} {
			if err := j.Put(c.Key, c.Value); err != nil {
				t.Fatal(err)
			}
		}
		j.Close()
		logs, _ := filepath.Glob(filepath.Join(dir, "log.*"))
		data, _ := os.ReadFile(logs[0])
		i := bytes.Index(data, []byte(`"uid":"u0"`))
		data[i+8] ^= 1
		os.WriteFile(logs[0], data, 0o600)

		c, rep, err := Open(dir, "b", WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside)))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		first := c.List()
		c.Close()
		if rep.Damage == nil || !rep.Damage.Unknown {
			t.Fatalf("damage not reported: %+v", rep)
		}
		for _, e := range first {
			r := record{Namespace: e.Claim.Namespace, Name: e.Claim.Name, UID: e.Claim.UID, State: e.State, BootID: e.BootID, PodUIDs: e.PodUIDs, Uncertain: e.Uncertain}
			r.setDrivers(e.Drivers)
			if err := r.check(e.Claim.UID); err != nil || (e.Claim.UID != "ua" && e.Uncertain == "") {
				t.Fatalf("recovered entry %+v: %v", e, err)
			}
		}
		c, _, err = Open(dir, "b")
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer c.Close()
		if again := c.List(); !reflect.DeepEqual(first, again) {
			t.Fatalf("reopen changed %+v into %+v", first, again)
		}
		// Every device an entry names without admin access is held by it.
		for _, e := range first {
			for driver, devs := range e.Drivers {
				for _, d := range devs {
					if holders := c.Holders(driver, d.Pool, d.Device); !d.AdminAccess && !slices.Contains(holders, e.Claim) {
						t.Fatalf("device %s/%s/%s of %v held by %v only", driver, d.Pool, d.Device, e.Claim, holders)
					}
				}
			}
		}
	})
}
