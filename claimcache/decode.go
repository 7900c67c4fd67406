package claimcache

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dranode/dranode/checkpoint"
)

// DecodeEntry decodes one value of a claim record as it is stored in the
// record's journal files, for tools that read those files without opening
// the record (dranodectl checkpoint inspect, which must not take the lock or
// write): key is the value's journal key (the claim UID), version the format
// version in the header of the file it was read from. A value of an older
// version is upgraded as Open upgrades it; a newer version is a
// *checkpoint.NewerVersionError; a failed upgrade a
// *checkpoint.MigrationError; a value that does not decode, or that Open
// would refuse, an error matching ErrBadRecord. The entry is Stale unless it
// was recorded in currentBoot.
func DecodeEntry(key string, version int, value []byte, currentBoot string) (Entry, error) {
	s := storeSchema()
	if version > s.Version {
		return Entry{}, &checkpoint.NewerVersionError{Kind: s.Kind, Version: version, Supported: s.Version}
	}
	if version < 0 {
		return Entry{}, fmt.Errorf("%w: record %q: format version %d is negative", ErrBadRecord, key, version)
	}
	raw := json.RawMessage(value)
	for v := version; v < s.Version; v++ {
		step := s.Migrations[v]
		if step == nil {
			return Entry{}, &checkpoint.MigrationError{Kind: s.Kind, From: v, Err: errors.New("no migration from this version")}
		}
		up, err := step(raw)
		if err != nil {
			return Entry{}, &checkpoint.MigrationError{Kind: s.Kind, From: v, Err: err}
		}
		raw = up
	}
	var r record
	if err := json.Unmarshal(raw, &r); err != nil {
		return Entry{}, fmt.Errorf("%w: record %q does not decode: %v", ErrBadRecord, key, err)
	}
	if err := r.check(key); err != nil {
		return Entry{}, err
	}
	return r.entry(currentBoot), nil
}
