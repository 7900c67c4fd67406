package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dranode/dranode/checkpoint/internal/jsonfast"
)

// File stores one document of type T at one path. It is safe for concurrent
// use; operations are serialized.
type File[T any] struct {
	path   string
	schema Schema
	opts   options
	fsyncs atomic.Uint64

	mu     sync.Mutex
	lock   *Lock // nil once closed
	vetted bool  // the bytes at path are known to be safe to replace
}

// OpenFile opens the store at path and takes an exclusive lock on
// path+".lock". It neither reads nor creates path; Load and Save do. Another
// holder of the lock makes it fail with an error matching ErrLocked.
func OpenFile[T any](path string, schema Schema, opts ...Option) (*File[T], error) {
	if err := schema.validate(); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, fmt.Errorf("checkpoint: OpenFile: empty path")
	}
	lock, err := TryLock(path + ".lock")
	if err != nil {
		return nil, err
	}
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	temps := []string{name}
	if schema.Version > 1 {
		temps = append(temps, name+".v"+strconv.Itoa(schema.Version-1)) // down-level copy
	}
	for _, n := range temps {
		if err := removeTemps(dir, n); err != nil {
			lock.Unlock()
			return nil, err
		}
	}
	return &File[T]{path: path, schema: schema, opts: buildOptions(opts), lock: lock}, nil
}

// Path returns the path of the stored document.
func (f *File[T]) Path() string { return f.path }

// Fsyncs returns the number of fsync calls (files and directories) this File
// has made since it was opened.
func (f *File[T]) Fsyncs() uint64 { return f.fsyncs.Load() }

// Load reads, verifies and decodes the document, upgrading older format
// versions in memory. A missing file gives an error matching fs.ErrNotExist;
// bad bytes a *CorruptError (or, under MoveCorruptAside, a *MovedAsideError
// that matches fs.ErrNotExist); a newer format a *NewerVersionError.
func (f *File[T]) Load() (T, error) {
	var zero T
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lock == nil {
		return zero, ErrClosed
	}
	data, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		f.vetted = true
		return zero, err
	}
	if err != nil {
		return zero, fmt.Errorf("checkpoint: load: %w", err)
	}
	version, payload, err := decodeFile(f.path, data, f.schema)
	var newer *NewerVersionError
	fromCopy := false
	if errors.As(err, &newer) {
		if v, p, ok := f.downgradeCopy(data, newer); ok {
			version, payload, err, fromCopy = v, p, nil, true
		}
	}
	if err == nil {
		var v T
		v, err = f.decodePayload(version, payload)
		if err == nil {
			f.vetted = true
			return v, nil
		}
	}
	if fromCopy {
		// The main file is newer, not corrupt: no policy may move it.
		return zero, fmt.Errorf("checkpoint: load down-level copy %s: %w", f.downgradePath(f.schema.Version), err)
	}
	return zero, f.handleBad(err)
}

// handleBad applies the corrupt policy to a Load or vetting failure.
func (f *File[T]) handleBad(err error) error {
	var corrupt *CorruptError
	if f.opts.corrupt != MoveCorruptAside || !errors.As(err, &corrupt) {
		return err
	}
	aside, merr := moveAside(f.path, time.Now(), &f.fsyncs)
	if merr != nil {
		return fmt.Errorf("%w (while handling: %w)", merr, err)
	}
	f.vetted = true
	return &MovedAsideError{Path: f.path, Aside: aside, Cause: corrupt}
}

func (f *File[T]) decodePayload(version int, payload []byte) (T, error) {
	var v T
	payload, err := f.schema.upgrade(f.path, version, payload)
	if err != nil {
		return v, err
	}
	if err := jsonfast.Unmarshal(payload, &v); err != nil {
		return v, &CorruptError{Path: f.path, Reason: fmt.Sprintf("payload (format version %d, upgraded to %d) does not decode", version, f.schema.Version), Err: err}
	}
	return v, nil
}

// decodeFile verifies a File's bytes and returns its format version and the
// payload exactly as stored.
func decodeFile(path string, data []byte, s Schema) (int, []byte, error) {
	h, off, err := readHeader(path, data, magicFile, s)
	if err != nil {
		return 0, nil, err
	}
	payload, next, fault := readFrame(data, off)
	if fault != faultNone {
		return 0, nil, &CorruptError{Path: path, Offset: int64(off), Reason: "payload: " + string(fault)}
	}
	if next != len(data) {
		return 0, nil, &CorruptError{Path: path, Offset: int64(next), Reason: fmt.Sprintf("%d unexpected bytes after the payload", len(data)-next)}
	}
	if !json.Valid(payload) {
		return 0, nil, &CorruptError{Path: path, Offset: int64(off), Reason: "payload is not valid JSON"}
	}
	return h.Version, payload, nil
}

func encodeFile(s Schema, version int, payload []byte, copyOf string) []byte {
	out := make([]byte, 0, magicLen+2*frameHdrLen+64+len(payload))
	out = appendHeader(out, magicFile, header{Kind: s.Kind, Version: version, CopyOf: copyOf})
	return appendFrame(out, payload)
}

// Save replaces the document durably: when it returns nil the new document
// survives a crash. It refuses to replace a file of a newer format version
// (*NewerVersionError) or, under FailOnCorrupt, a corrupt one
// (*CorruptError), so that nothing that cannot be read is destroyed.
func (f *File[T]) Save(v T) error {
	payload, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("checkpoint: save %s: encode: %w", f.path, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lock == nil {
		return ErrClosed
	}
	if err := f.vet(); err != nil {
		return err
	}
	main := encodeFile(f.schema, f.schema.Version, payload, "")
	if f.opts.downgrade != nil && f.schema.Version > 1 {
		down, err := f.opts.downgrade(payload)
		if err != nil {
			return fmt.Errorf("checkpoint: save %s: downgrade copy to version %d: %w", f.path, f.schema.Version-1, err)
		}
		if !json.Valid(down) {
			return fmt.Errorf("checkpoint: save %s: downgrade copy to version %d is not valid JSON", f.path, f.schema.Version-1)
		}
		// The copy goes first: until the main file is renamed into
		// place, the copy's CopyOf names a file that does not exist yet,
		// so an old reader never pairs a stale main file with it.
		copyOf := fmt.Sprintf("%08x", checksum(payload))
		if err := writeFile(f.downgradePath(f.schema.Version-1), encodeFile(f.schema, f.schema.Version-1, down, copyOf), &f.fsyncs); err != nil {
			return err
		}
	}
	return writeFile(f.path, main, &f.fsyncs)
}

// vet makes sure the bytes at path may be replaced.
func (f *File[T]) vet() error {
	if f.vetted {
		return nil
	}
	data, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		f.vetted = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: save: read existing file: %w", err)
	}
	version, payload, err := decodeFile(f.path, data, f.schema)
	if err == nil {
		// Only a document this code can read may be replaced by it.
		_, err = f.decodePayload(version, payload)
	}
	if err != nil {
		var newer *NewerVersionError
		if errors.As(err, &newer) {
			if _, _, ok := f.downgradeCopy(data, newer); ok {
				f.vetted = true
				return nil
			}
		}
		if err := f.handleBad(err); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	f.vetted = true
	return nil
}

func (f *File[T]) downgradePath(version int) string {
	return f.path + ".v" + strconv.Itoa(version)
}

// downgradeCopy looks for a down-level copy, written by a newer release with
// WithDowngradeCopy, that this code can read and that belongs to exactly the
// main file on disk.
func (f *File[T]) downgradeCopy(mainData []byte, newer *NewerVersionError) (int, []byte, bool) {
	_, off, err := readHeader(f.path, mainData, magicFile, Schema{Kind: f.schema.Kind, Version: newer.Version})
	if err != nil {
		return 0, nil, false
	}
	mainPayload, _, fault := readFrame(mainData, off)
	if fault != faultNone {
		return 0, nil, false
	}
	copyPath := f.downgradePath(f.schema.Version)
	data, err := os.ReadFile(copyPath)
	if err != nil {
		return 0, nil, false
	}
	h, _, err := readHeader(copyPath, data, magicFile, f.schema)
	if err != nil || h.CopyOf != fmt.Sprintf("%08x", checksum(mainPayload)) {
		return 0, nil, false
	}
	version, payload, err := decodeFile(copyPath, data, f.schema)
	if err != nil {
		return 0, nil, false
	}
	return version, payload, true
}

// Close releases the lock. It does not touch the stored document.
func (f *File[T]) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lock == nil {
		return ErrClosed
	}
	err := f.lock.Unlock()
	f.lock = nil
	return err
}
