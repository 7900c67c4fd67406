package ckptfmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// JournalFile is one file of a journal directory as Parse saw it.
type JournalFile struct {
	Name       string  `json:"name"`
	Generation int64   `json:"generation"`
	Parsed     *Parsed `json:"parsed"`
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
}

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

// ReadJournal reads and replays the journal in dir. Superseded logs (older
// than the snapshot) are skipped, as the restore does. Any file that fails to
// verify is a *FileError wrapping a *CorruptError; the Journal returned with
// it holds what was read up to that point.
func ReadJournal(dir string) (*Journal, error) {
	j := &Journal{Dir: dir, State: map[string]json.RawMessage{}}
	snapGen := int64(1)
	if data, err := os.ReadFile(filepath.Join(dir, "snapshot")); err == nil {
		p, err := Parse(data)
		if err != nil {
			return j, &FileError{File: "snapshot", Err: err}
		}
		if p.Type != TypeSnapshot {
			return j, &FileError{File: "snapshot", Err: &CorruptError{Reason: fmt.Sprintf("a %s file where the snapshot belongs", p.Type)}}
		}
		if p.Header.Generation == nil || *p.Header.Generation < 1 {
			return j, &FileError{File: "snapshot", Err: &CorruptError{Offset: magicLen, Reason: "snapshot header without a valid generation"}}
		}
		snapGen = *p.Header.Generation
		if err := j.add("snapshot", snapGen, p); err != nil {
			return j, err
		}
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
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return j, fmt.Errorf("read journal log: %w", err)
		}
		p, err := Parse(data)
		if err == nil && p.Type != TypeLog {
			err = &CorruptError{Reason: fmt.Sprintf("a %s file where a log belongs", p.Type)}
		}
		if err == nil && p.TornTail != nil && i != len(gens)-1 {
			err = p.TornTail // only the newest log may end in a torn append
		}
		if err != nil {
			return j, &FileError{File: name, Err: err}
		}
		if err := j.add(name, g, p); err != nil {
			return j, err
		}
	}
	if len(j.Files) == 0 {
		return j, fmt.Errorf("%s: no journal files (snapshot, log.N): %w", dir, ErrNotDranode)
	}
	return j, nil
}

func (j *Journal) add(name string, gen int64, p *Parsed) error {
	if j.Kind == "" {
		j.Kind = p.Header.Kind
	} else if p.Header.Kind != j.Kind {
		return &FileError{File: name, Err: &CorruptError{Offset: magicLen, Reason: fmt.Sprintf("kind %q in a journal of kind %q", p.Header.Kind, j.Kind)}}
	}
	if !slices.Contains(j.Versions, p.Header.Version) {
		j.Versions = append(j.Versions, p.Header.Version)
		slices.Sort(j.Versions)
	}
	j.Files = append(j.Files, JournalFile{Name: name, Generation: gen, Parsed: p})
	for _, r := range p.Records {
		for _, c := range r.Changes {
			if c.Op == "put" {
				j.State[c.Key] = c.Value
			} else {
				delete(j.State, c.Key)
			}
		}
	}
	return nil
}
