package checkpoint

import (
	"encoding/json"
	"fmt"
)

// Schema names a stored kind and its format history.
//
// Version is the format this code writes, 1 or more. Migrations[v], for v
// from 0 to Version-1, upgrades a payload of format v to format v+1, raw
// JSON in and raw JSON out; loading data of version v < Version runs
// Migrations[v], Migrations[v+1], ... in memory. Version 0 is never written
// by this package: it names a layout older than the first one written (a
// prototype, or data converted from elsewhere and stored with "version":0)
// that Migrations[0] upgrades.
//
// For a File the payload is the whole document; for a Journal it is one
// record's value. A migration must not keep or modify its input slice after
// returning.
type Schema struct {
	Kind       string // e.g. "dranode.io/claimcache"; data of another kind is refused
	Version    int    // current format version, >= 1
	Migrations map[int]func(json.RawMessage) (json.RawMessage, error)
}

func (s Schema) validate() error {
	if s.Kind == "" {
		return fmt.Errorf("%w: empty Kind", ErrInvalidSchema)
	}
	if s.Version < 1 {
		return fmt.Errorf("%w: kind %q: Version %d, want >= 1", ErrInvalidSchema, s.Kind, s.Version)
	}
	for v, m := range s.Migrations {
		if v < 0 || v >= s.Version {
			return fmt.Errorf("%w: kind %q: migration from version %d, but only versions 0..%d can be upgraded", ErrInvalidSchema, s.Kind, v, s.Version-1)
		}
		if m == nil {
			return fmt.Errorf("%w: kind %q: migration from version %d is nil", ErrInvalidSchema, s.Kind, v)
		}
	}
	return nil
}

// upgrade runs the migrations from version from to s.Version.
func (s Schema) upgrade(path string, from int, payload json.RawMessage) (json.RawMessage, error) {
	for v := from; v < s.Version; v++ {
		m := s.Migrations[v]
		if m == nil {
			return nil, &MigrationError{Path: path, Kind: s.Kind, From: v, Err: fmt.Errorf("no migration registered from version %d", v)}
		}
		out, err := m(payload)
		if err != nil {
			return nil, &MigrationError{Path: path, Kind: s.Kind, From: v, Err: err}
		}
		payload = out
	}
	return payload, nil
}
