package ckptfmt

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// FileType is the role of a dranode state file, told by its 8-byte magic.
type FileType string

// The three framed file types.
const (
	TypeFile     FileType = "file"     // one document (checkpoint.File)
	TypeSnapshot FileType = "snapshot" // a journal's compacted state
	TypeLog      FileType = "log"      // a journal's append-only log
)

var magics = map[string]FileType{
	"DRNFILE1": TypeFile,
	"DRNSNAP1": TypeSnapshot,
	"DRNJLOG1": TypeLog,
}

// A frame's length field is a uint32, so the format bounds a frame to 4 GiB;
// Scan allocates no more than the frame's length and never more than the
// bytes the file has left after its header.
const (
	magicLen    = 8
	frameHdrLen = 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrNotDranode means the bytes do not start with a dranode magic: the file is
// something else (a kubelet checkpoint, say), not a damaged dranode file.
var ErrNotDranode = errors.New("not a dranode checkpoint file")

// ErrCorrupt matches every *CorruptError.
var ErrCorrupt = errors.New("corrupt dranode checkpoint")

// CorruptError says where a dranode file stops being trustworthy.
type CorruptError struct {
	Offset int64  // byte offset of the failing frame or field
	Reason string // what failed
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("corrupt at byte %d: %s", e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Header is the first frame of every file. Unknown fields are ignored, as the
// format requires.
type Header struct {
	Kind       string `json:"kind"`
	Version    int    `json:"version"`
	Generation *int64 `json:"generation,omitempty"`
	Records    *int   `json:"records,omitempty"`
	CopyOf     string `json:"copyOf,omitempty"`
}

// Change is one put or delete inside a journal record.
type Change struct {
	Op    string          `json:"op"` // "put" or "delete"
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value,omitempty"`
}

// Record is one verified frame after the header: for a File the document,
// for a snapshot or log a batch of changes.
type Record struct {
	Offset   int64           `json:"offset"`
	Document json.RawMessage `json:"document,omitempty"`
	Changes  []Change        `json:"changes,omitempty"`
}

// Summary is what Scan verified of one file, without its records.
type Summary struct {
	Type   FileType `json:"type"`
	Header Header   `json:"header"`
	// RecordCount is the number of records that verified.
	RecordCount int `json:"recordCount"`
	// TornTail is set for a log whose last append was cut short by a crash:
	// the bytes from TornTail.Offset on failed to verify and no valid frame
	// follows them. Readers ignore such a tail, so it is not corruption.
	TornTail *CorruptError `json:"tornTail,omitempty"`
}

// Parsed is a whole file as Parse read it: its summary and every record.
type Parsed struct {
	Type     FileType      `json:"type"`
	Header   Header        `json:"header"`
	Records  []Record      `json:"records"`
	TornTail *CorruptError `json:"tornTail,omitempty"`
}

// Parse verifies a dranode file held in memory and returns all its records;
// see Scan, which it calls, for what is verified. It is for small inputs
// (tests, fuzzing); files are read with Scan, one record at a time.
func Parse(data []byte) (*Parsed, error) {
	records := []Record{}
	s, err := Scan(context.Background(), bytes.NewReader(data), int64(len(data)), func(_ *Summary, r *Record) error {
		records = append(records, r.Clone())
		return nil
	})
	if s == nil {
		return nil, err
	}
	return &Parsed{Type: s.Type, Header: s.Header, Records: records, TornTail: s.TornTail}, err
}

// Clone copies r out of the buffer Scan reuses.
func (r *Record) Clone() Record {
	c := Record{Offset: r.Offset}
	if r.Document != nil {
		c.Document = bytes.Clone(r.Document)
	}
	if r.Changes != nil {
		c.Changes = make([]Change, len(r.Changes))
		for i, ch := range r.Changes {
			c.Changes[i] = Change{Op: ch.Op, Key: ch.Key, Value: bytes.Clone(ch.Value)}
		}
	}
	return c
}

// Scan verifies the dranode file of size bytes in r: magic, every frame's
// length and CRC-32C, the header, and the record encoding. It reads the file
// once, front to back, holding one frame at a time, and calls visit (if not
// nil) with each verified record in order, and with the summary so far (its
// header verified, RecordCount counting this record). The record and every byte slice
// in it are reused after visit returns: Clone what must outlive the call. An
// error from visit stops the scan and is returned as is.
//
// Bytes without a dranode magic give an error matching ErrNotDranode and a
// nil Summary; damage gives a *CorruptError with the Summary of what verified
// before it. The scan stops when ctx ends, with an error wrapping ctx's.
func Scan(ctx context.Context, r io.ReaderAt, size int64, visit func(*Summary, *Record) error) (*Summary, error) {
	var magic [magicLen]byte
	n, err := r.ReadAt(magic[:min(size, magicLen)], 0)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("read magic: %w", err)
	}
	if size < magicLen {
		if n > 0 && bytes.HasPrefix([]byte("DRN"), magic[:min(n, 3)]) {
			return &Summary{}, &CorruptError{Offset: 0, Reason: "file shorter than its magic"}
		}
		return nil, ErrNotDranode
	}
	typ, ok := magics[string(magic[:])]
	if !ok {
		return nil, ErrNotDranode
	}
	s := &Summary{Type: typ}
	fr := &frameReader{ctx: ctx, r: r, size: size, br: bufio.NewReaderSize(io.NewSectionReader(r, magicLen, size-magicLen), 64<<10), off: magicLen}
	payload, fault, err := fr.next()
	if err != nil {
		return s, err
	}
	if fault != "" {
		return s, &CorruptError{Offset: magicLen, Reason: "header " + fault}
	}
	h, err := decodeHeader(payload)
	if err != nil {
		return s, &CorruptError{Offset: magicLen, Reason: err.Error()}
	}
	s.Header = h
	rec := &Record{}
	for fr.off < size {
		off := fr.off
		payload, fault, err := fr.next()
		if err != nil {
			return s, err
		}
		if fault != "" {
			bad := &CorruptError{Offset: off, Reason: fault}
			if typ == TypeLog {
				valid, err := validFrameAfter(ctx, r, size, off+1)
				if err != nil {
					return s, err
				}
				if !valid {
					s.TornTail = bad
					return s, nil
				}
			}
			return s, bad
		}
		rec.Offset, rec.Document, rec.Changes = off, nil, rec.Changes[:0]
		if typ == TypeFile {
			rec.Document = json.RawMessage(payload)
		} else if rec.Changes, err = decodeChanges(payload, rec.Changes); err != nil {
			return s, &CorruptError{Offset: off, Reason: err.Error()}
		}
		s.RecordCount++
		if visit != nil {
			if err := visit(s, rec); err != nil {
				return s, err
			}
		}
	}
	return s, s.checkCounts()
}

func (s *Summary) checkCounts() error {
	switch s.Type {
	case TypeFile:
		if s.RecordCount != 1 {
			return &CorruptError{Reason: fmt.Sprintf("a single-document file holds %d documents, want 1", s.RecordCount)}
		}
	case TypeSnapshot:
		if s.Header.Records == nil {
			return &CorruptError{Offset: magicLen, Reason: "snapshot header without a record count"}
		}
		if *s.Header.Records != s.RecordCount {
			return &CorruptError{Reason: fmt.Sprintf("snapshot header announces %d records, file holds %d", *s.Header.Records, s.RecordCount)}
		}
	}
	return nil
}

// frameReader reads frames one after the other into one reused buffer.
type frameReader struct {
	ctx  context.Context
	r    io.ReaderAt
	size int64
	br   *bufio.Reader
	off  int64 // offset of the next frame
	buf  []byte
}

// next reads the frame at fr.off. A frame that does not verify is a fault
// (and fr.off stays at it); err is an I/O error or the end of ctx.
func (fr *frameReader) next() (payload []byte, fault string, err error) {
	if err := fr.ctx.Err(); err != nil {
		return nil, "", fmt.Errorf("stopped at byte %d of %d: %w", fr.off, fr.size, context.Cause(fr.ctx))
	}
	left := fr.size - fr.off
	if left < frameHdrLen {
		return nil, "truncated frame header", nil
	}
	var hdr [frameHdrLen]byte
	if _, err := io.ReadFull(fr.br, hdr[:]); err != nil {
		return nil, "", fmt.Errorf("read frame at byte %d: %w", fr.off, err)
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	sum := binary.LittleEndian.Uint32(hdr[4:])
	if n == 0 {
		return nil, "frame of length 0", nil
	}
	if int64(n) > left-frameHdrLen {
		return nil, fmt.Sprintf("frame of %d bytes runs past the end of the file", n), nil
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	payload = fr.buf[:n]
	if _, err := io.ReadFull(fr.br, payload); err != nil {
		return nil, "", fmt.Errorf("read frame at byte %d: %w", fr.off, err)
	}
	if got := crc32.Checksum(payload, castagnoli); got != sum {
		return nil, fmt.Sprintf("checksum mismatch (stored %08x, computed %08x)", sum, got), nil
	}
	fr.off += frameHdrLen + int64(n)
	return payload, "", nil
}

// validFrameAfter reports whether any offset from start on holds a frame that
// verifies: damage followed by good data is corruption, not a torn append.
// It reads through a window, never the rest of the file at once.
func validFrameAfter(ctx context.Context, r io.ReaderAt, size, start int64) (bool, error) {
	const window = 1 << 20
	buf := make([]byte, window)
	base, filled := start, int64(0) // buf holds the bytes [base, base+filled)
	for off := start; off+frameHdrLen < size; off++ {
		if (off-start)%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return false, fmt.Errorf("stopped looking for a valid frame after the damage at byte %d of %d: %w", off, size, context.Cause(ctx))
			}
		}
		if off+frameHdrLen > base+filled {
			base = off
			m, err := r.ReadAt(buf[:min(window, size-base)], base)
			if err != nil && err != io.EOF {
				return false, fmt.Errorf("read at byte %d: %w", base, err)
			}
			filled = int64(m)
			if off+frameHdrLen > base+filled {
				return false, nil // the file shrank under us
			}
		}
		hdr := buf[off-base:]
		n := int64(binary.LittleEndian.Uint32(hdr))
		if n == 0 || n > size-off-frameHdrLen {
			continue
		}
		sum := binary.LittleEndian.Uint32(hdr[4:])
		ok, err := checksumAt(ctx, r, off+frameHdrLen, n, sum, buf, base, filled)
		if ctx.Err() != nil {
			// Most of the scan is spent inside checksumAt: say where the
			// scan stopped, as the check above does.
			return false, fmt.Errorf("stopped looking for a valid frame after the damage at byte %d of %d: %w", off, size, context.Cause(ctx))
		}
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// checksumAt reports whether the n bytes at off have CRC-32C sum, using the
// bytes of win (which holds [base, base+filled)) where it can.
func checksumAt(ctx context.Context, r io.ReaderAt, off, n int64, sum uint32, win []byte, base, filled int64) (bool, error) {
	if off+n <= base+filled {
		return crc32.Checksum(win[off-base:off-base+n], castagnoli) == sum, nil
	}
	var crc uint32
	chunk := make([]byte, min(n, 1<<20))
	for done := int64(0); done < n; {
		if err := ctx.Err(); err != nil {
			return false, context.Cause(ctx) // the caller says where
		}
		m, err := r.ReadAt(chunk[:min(int64(len(chunk)), n-done)], off+done)
		if m == 0 && err != nil {
			if err == io.EOF {
				return false, nil
			}
			return false, fmt.Errorf("read at byte %d: %w", off+done, err)
		}
		crc = crc32.Update(crc, castagnoli, chunk[:m])
		done += int64(m)
	}
	return crc == sum, nil
}

func decodeHeader(payload []byte) (Header, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(payload, &raw); err != nil {
		return Header{}, fmt.Errorf("header is not a JSON object: %w", err)
	}
	var h Header
	if err := json.Unmarshal(payload, &h); err != nil {
		return Header{}, fmt.Errorf("header fields: %w", err)
	}
	if h.Kind == "" {
		return Header{}, errors.New("header has no kind")
	}
	v, ok := raw["version"]
	if !ok || string(v) == "null" {
		return Header{}, errors.New("header has no version")
	}
	if h.Version < 0 {
		return Header{}, fmt.Errorf("header version %d is negative", h.Version)
	}
	return h, nil
}

// decodeChanges appends the changes of a record payload to out. Values alias
// payload.
func decodeChanges(payload []byte, out []Change) ([]Change, error) {
	for i := 0; i < len(payload); {
		op := payload[i]
		i++
		key, n, err := lengthPrefixed(payload[i:], "key")
		if err != nil {
			return nil, err
		}
		i += n
		switch op {
		case 'P':
			val, n, err := lengthPrefixed(payload[i:], "value")
			if err != nil {
				return nil, fmt.Errorf("put %q: %w", key, err)
			}
			i += n
			if !json.Valid(val) {
				return nil, fmt.Errorf("put %q: value is not JSON", key)
			}
			out = append(out, Change{Op: "put", Key: string(key), Value: json.RawMessage(val)})
		case 'D':
			out = append(out, Change{Op: "delete", Key: string(key)})
		default:
			return nil, fmt.Errorf("unknown change tag 0x%02x", op)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("empty record")
	}
	return out, nil
}

func lengthPrefixed(b []byte, what string) ([]byte, int, error) {
	n, used := binary.Uvarint(b)
	if used <= 0 {
		return nil, 0, fmt.Errorf("bad %s length", what)
	}
	if n == 0 {
		return nil, 0, fmt.Errorf("empty %s", what)
	}
	if n > uint64(len(b)-used) {
		return nil, 0, fmt.Errorf("%s of %d bytes runs past the record", what, n)
	}
	return b[used : used+int(n)], used + int(n), nil
}
