package ckptfmt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
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

// Parsed is what Parse could verify of one file.
type Parsed struct {
	Type    FileType `json:"type"`
	Header  Header   `json:"header"`
	Records []Record `json:"records"`
	// TornTail is set for a log whose last append was cut short by a crash:
	// the bytes from TornTail.Offset on failed to verify and no valid frame
	// follows them. Readers ignore such a tail, so it is not corruption.
	TornTail *CorruptError `json:"tornTail,omitempty"`
}

// Parse verifies a dranode file: magic, every frame's length and CRC-32C, the
// header, and the record encoding. Bytes without a dranode magic give an error
// matching ErrNotDranode; damage gives a *CorruptError (with what was verified
// before it in the returned Parsed, which is nil only for ErrNotDranode).
func Parse(data []byte) (*Parsed, error) {
	if len(data) < magicLen {
		if len(data) > 0 && bytes.HasPrefix([]byte("DRN"), data[:min(len(data), 3)]) {
			return &Parsed{}, &CorruptError{Offset: 0, Reason: "file shorter than its magic"}
		}
		return nil, ErrNotDranode
	}
	typ, ok := magics[string(data[:magicLen])]
	if !ok {
		return nil, ErrNotDranode
	}
	p := &Parsed{Type: typ, Records: []Record{}}
	payload, next, fault := readFrame(data, magicLen)
	if fault != "" {
		return p, &CorruptError{Offset: magicLen, Reason: "header " + fault}
	}
	h, err := decodeHeader(payload)
	if err != nil {
		return p, &CorruptError{Offset: magicLen, Reason: err.Error()}
	}
	p.Header = h
	off := next
	for off < len(data) {
		payload, next, fault := readFrame(data, off)
		if fault != "" {
			bad := &CorruptError{Offset: int64(off), Reason: fault}
			if typ == TypeLog && !validFrameAfter(data, off+1) {
				p.TornTail = bad
				return p, nil
			}
			return p, bad
		}
		rec := Record{Offset: int64(off)}
		if typ == TypeFile {
			rec.Document = json.RawMessage(payload)
		} else {
			changes, err := decodeChanges(payload)
			if err != nil {
				return p, &CorruptError{Offset: int64(off), Reason: err.Error()}
			}
			rec.Changes = changes
		}
		p.Records = append(p.Records, rec)
		off = next
	}
	if err := p.checkCounts(); err != nil {
		return p, err
	}
	return p, nil
}

func (p *Parsed) checkCounts() error {
	switch p.Type {
	case TypeFile:
		if len(p.Records) != 1 {
			return &CorruptError{Reason: fmt.Sprintf("a single-document file holds %d documents, want 1", len(p.Records))}
		}
	case TypeSnapshot:
		if p.Header.Records == nil {
			return &CorruptError{Offset: magicLen, Reason: "snapshot header without a record count"}
		}
		if *p.Header.Records != len(p.Records) {
			return &CorruptError{Reason: fmt.Sprintf("snapshot header announces %d records, file holds %d", *p.Header.Records, len(p.Records))}
		}
	}
	return nil
}

func readFrame(data []byte, off int) (payload []byte, next int, fault string) {
	if len(data)-off < frameHdrLen {
		return nil, off, "truncated frame header"
	}
	n := binary.LittleEndian.Uint32(data[off:])
	sum := binary.LittleEndian.Uint32(data[off+4:])
	if n == 0 {
		return nil, off, "frame of length 0"
	}
	if uint64(n) > uint64(len(data)-off-frameHdrLen) {
		return nil, off, fmt.Sprintf("frame of %d bytes runs past the end of the file", n)
	}
	payload = data[off+frameHdrLen : off+frameHdrLen+int(n)]
	if got := crc32.Checksum(payload, castagnoli); got != sum {
		return nil, off, fmt.Sprintf("checksum mismatch (stored %08x, computed %08x)", sum, got)
	}
	return payload, off + frameHdrLen + int(n), ""
}

// validFrameAfter reports whether any offset from start on holds a frame that
// verifies: damage followed by good data is corruption, not a torn append.
func validFrameAfter(data []byte, start int) bool {
	for off := start; off+frameHdrLen < len(data); off++ {
		if _, _, fault := readFrame(data, off); fault == "" {
			return true
		}
	}
	return false
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

func decodeChanges(payload []byte) ([]Change, error) {
	var out []Change
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
