package ckptfmt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/dranode/dranode/tools/internal/regularfile"
)

// JournalFile is one file of a journal directory as Scan saw it.
type JournalFile struct {
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	Summary
}

// Journal is a journal directory replayed the way the checkpoint module
// restores it: the snapshot, then the live logs in generation order.
type Journal struct {
	Dir   string                     `json:"dir"`
	Kind  string                     `json:"kind"`
	Files []JournalFile              `json:"files"`
	State map[string]json.RawMessage `json:"state"`
	// Versions lists the distinct format versions found in the live files.
	Versions []int `json:"versions"`

	// versions holds, for each key in State, the format version of the
	// file its value came from: what decoding the value needs.
	versions map[string]int
}

// ValueVersion returns the format version of the file the value of key in
// State was read from.
func (j *Journal) ValueVersion(key string) int { return j.versions[key] }

// FileError names the journal file a problem was found in.
type FileError struct {
	File string
	Err  error
}

func (e *FileError) Error() string { return e.File + ": " + e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// IsJournalDir reports whether dir holds journal files (a snapshot or a log.N).
func IsJournalDir(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "snapshot")); err == nil {
		return true
	}
	m, _ := filepath.Glob(filepath.Join(dir, "log.*"))
	for _, p := range m {
		if _, ok := logGeneration(filepath.Base(p)); ok {
			return true
		}
	}
	return false
}

func logGeneration(name string) (int64, bool) {
	s, ok := strings.CutPrefix(name, "log.")
	if !ok {
		return 0, false
	}
	g, err := strconv.ParseInt(s, 10, 64)
	return g, err == nil && g >= 1
}

// ReadJournal reads and replays the journal in dir, one record at a time:
// it holds the replayed state, never a whole file. Superseded logs (older
// than the snapshot) are skipped, as the restore does. Any file that fails to
// verify is a *FileError wrapping a *CorruptError; a journal file that is not
// a regular file is a *FileError wrapping a *regularfile.NotRegularError. The
// Journal returned with an error holds what was read up to that point. The
// read stops when ctx ends.
func ReadJournal(ctx context.Context, dir string) (*Journal, error) {
	j := &Journal{Dir: dir, State: map[string]json.RawMessage{}, versions: map[string]int{}}
	snapGen := int64(1)
	if _, err := os.Lstat(filepath.Join(dir, "snapshot")); err == nil {
		p, err := j.scan(ctx, "snapshot")
		if err != nil {
			return j, err
		}
		if p.Type != TypeSnapshot {
			return j, &FileError{File: "snapshot", Err: &CorruptError{Reason: fmt.Sprintf("a %s file where the snapshot belongs", p.Type)}}
		}
		if p.Header.Generation == nil || *p.Header.Generation < 1 {
			return j, &FileError{File: "snapshot", Err: &CorruptError{Offset: magicLen, Reason: "snapshot header without a valid generation"}}
		}
		snapGen = *p.Header.Generation
		j.add("snapshot", snapGen, p)
	} else if !errors.Is(err, os.ErrNotExist) {
		return j, fmt.Errorf("read journal snapshot: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return j, fmt.Errorf("list journal directory: %w", err)
	}
	var gens []int64
	for _, e := range entries {
		if g, ok := logGeneration(e.Name()); ok && g >= snapGen {
			gens = append(gens, g)
		}
	}
	slices.Sort(gens)
	for i, g := range gens {
		if want := snapGen + int64(i); g != want {
			return j, &FileError{File: fmt.Sprintf("log.%d", want), Err: &CorruptError{Reason: fmt.Sprintf("missing: live logs jump from generation %d to %d", want-1, g)}}
		}
		name := "log." + strconv.FormatInt(g, 10)
		p, err := j.scan(ctx, name)
		if err != nil {
			return j, err
		}
		if p.Type != TypeLog {
			err = &CorruptError{Reason: fmt.Sprintf("a %s file where a log belongs", p.Type)}
		} else if p.TornTail != nil && i != len(gens)-1 {
			err = p.TornTail // only the newest log may end in a torn append
		}
		if err != nil {
			return j, &FileError{File: name, Err: err}
		}
		j.add(name, g, p)
	}
	if len(j.Files) == 0 {
		return j, fmt.Errorf("%s: no journal files (snapshot, log.N): %w", dir, ErrNotDranode)
	}
	return j, nil
}

// scan verifies the journal file name and replays its records into j.State
// as they stream by. A file of another kind than the journal's is corrupt,
// and nothing of it is replayed.
func (j *Journal) scan(ctx context.Context, name string) (*Summary, error) {
	f, err := regularfile.Open(filepath.Join(j.Dir, name))
	if err != nil {
		return nil, &FileError{File: name, Err: err}
	}
	defer f.Close()
	s, err := Scan(ctx, f, f.Size(), func(s *Summary, r *Record) error {
		if s.RecordCount == 1 {
			if err := j.checkKind(name, s); err != nil {
				return err
			}
		}
		for _, c := range r.Changes {
			j.apply(c, s.Header.Version)
		}
		return nil
	})
	if err != nil {
		if s != nil && j.Kind == "" {
			// A damaged first file still says what the journal holds
			// when its header verified.
			j.Kind = s.Header.Kind
		}
		var fe *FileError
		if errors.As(err, &fe) {
			return nil, err
		}
		return nil, &FileError{File: name, Err: err}
	}
	if err := j.checkKind(name, s); err != nil {
		return nil, err
	}
	return s, nil
}

func (j *Journal) checkKind(name string, s *Summary) error {
	if j.Kind != "" && s.Header.Kind != j.Kind {
		return &FileError{File: name, Err: &CorruptError{Offset: magicLen, Reason: fmt.Sprintf("kind %q in a journal of kind %q", s.Header.Kind, j.Kind)}}
	}
	return nil
}

// apply replays one change, reusing the stored key and value memory where
// the key is already present: a log that rewrites the same claims costs
// what its live state costs.
func (j *Journal) apply(c Change, version int) {
	if c.Op != "put" {
		delete(j.State, c.Key)
		delete(j.versions, c.Key)
		return
	}
	j.versions[c.Key] = version
	if old, ok := j.State[c.Key]; ok && cap(old) >= len(c.Value) {
		j.State[c.Key] = append(old[:0], c.Value...)
		return
	}
	j.State[c.Key] = append(json.RawMessage(nil), c.Value...)
}

func (j *Journal) add(name string, gen int64, s *Summary) {
	if j.Kind == "" {
		j.Kind = s.Header.Kind
	}
	if !slices.Contains(j.Versions, s.Header.Version) {
		j.Versions = append(j.Versions, s.Header.Version)
		slices.Sort(j.Versions)
	}
	j.Files = append(j.Files, JournalFile{Name: name, Generation: gen, Summary: *s})
}
