package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
)

// Every stored file is an 8-byte magic followed by frames. A frame is
//
//	uint32 little-endian  payload length n (1 <= n)
//	uint32 little-endian  CRC-32C (Castagnoli) of the n payload bytes
//	n bytes               payload
//
// The first frame of every file is a JSON header. See README.md for the
// layout of each file type.
const (
	magicFile     = "DRNFILE1"
	magicSnapshot = "DRNSNAP1"
	magicLog      = "DRNJLOG1"
	magicLen      = 8
	frameHdrLen   = 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// beginFrame reserves a frame header at the end of dst; finishFrame fills it
// in once the payload has been appended after it. This lets callers encode a
// payload straight into the output buffer.
func beginFrame(dst []byte) ([]byte, int) {
	start := len(dst)
	return append(dst, make([]byte, frameHdrLen)...), start
}

func finishFrame(dst []byte, start int) []byte {
	payload := dst[start+frameHdrLen:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], checksum(payload))
	return dst
}

func appendFrame(dst, payload []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.LittleEndian.AppendUint32(dst, checksum(payload))
	return append(dst, payload...)
}

// frameFault says why a frame did not verify. Whether that is a torn tail or
// corruption depends on where it is, which the caller knows.
type frameFault string

const (
	faultNone     frameFault = ""
	faultShortHdr frameFault = "truncated frame header"
	faultEmpty    frameFault = "frame of length 0"
	faultShort    frameFault = "frame extends past end of file"
	faultChecksum frameFault = "frame checksum mismatch"
)

// readFrame verifies the frame starting at data[off:].
func readFrame(data []byte, off int) (payload []byte, next int, fault frameFault) {
	if len(data)-off < frameHdrLen {
		return nil, off, faultShortHdr
	}
	n := binary.LittleEndian.Uint32(data[off:])
	sum := binary.LittleEndian.Uint32(data[off+4:])
	if n == 0 {
		return nil, off, faultEmpty
	}
	if uint64(n) > uint64(len(data)-off-frameHdrLen) {
		return nil, off, faultShort
	}
	payload = data[off+frameHdrLen : off+frameHdrLen+int(n)]
	if checksum(payload) != sum {
		return nil, off, faultChecksum
	}
	return payload, off + frameHdrLen + int(n), faultNone
}

// validFrameAfter reports whether any offset after off starts a frame that
// verifies. It tells a torn tail (nothing valid follows the damage) from
// damage in the middle of acknowledged data. Its work is linear in the bytes
// after off (see frameSearch).
func validFrameAfter(data []byte, off int) bool {
	_, _, _, ok := newFrameSearch(data, off+1).next(off + 1)
	return ok
}

// header is the first frame of every file.
type header struct {
	Kind    string `json:"kind"`
	Version int    `json:"version"` // always written; 0 only in data older than the first written format
	// Journal files: the generation of the log, or for a snapshot the
	// generation of the first log it does not include.
	Generation uint64 `json:"generation,omitempty"`
	// Snapshots: the number of record frames that follow.
	Records *int `json:"records,omitempty"`
	// Logs created by rotation: the final size in bytes of the log of the
	// previous generation. Absent in a journal's first log and in logs
	// written before this field existed.
	PrevLogSize *int64 `json:"prevLogSize,omitempty"`
	// Down-level copies of a File: CRC-32C of the main file's payload frame,
	// as 8 lowercase hex digits.
	CopyOf string `json:"copyOf,omitempty"`
}

// storedHeader is a header as read. Its version stays raw until checked:
// version 0 is a format a schema may upgrade from, so a header whose version
// is missing, null or not an integer must not decode as 0 the way a plain
// int field would.
type storedHeader struct {
	header
	Version json.RawMessage `json:"version"` // shadows header.Version
}

// readHeader checks the magic and decodes the header frame, returning the
// offset of the frame after it. It checks the kind, and the version against
// supported, so that no caller can forget either. Version 0 passes like any
// older version: whether its payload can be read is up to the schema's
// migrations, and a missing step is a *MigrationError when the payload is
// upgraded, not corruption.
func readHeader(path string, data []byte, magic string, s Schema) (header, int, error) {
	var h header
	if len(data) < magicLen {
		return h, 0, &CorruptError{Path: path, Reason: fmt.Sprintf("file of %d bytes is shorter than the %d-byte magic", len(data), magicLen)}
	}
	if string(data[:magicLen]) != magic {
		return h, 0, &CorruptError{Path: path, Reason: fmt.Sprintf("magic %q, want %q", data[:magicLen], magic)}
	}
	payload, next, fault := readFrame(data, magicLen)
	if fault != faultNone {
		return h, 0, &CorruptError{Path: path, Offset: magicLen, Reason: "header: " + string(fault)}
	}
	var stored storedHeader
	if err := json.Unmarshal(payload, &stored); err != nil {
		return h, 0, &CorruptError{Path: path, Offset: magicLen, Reason: "header is not valid JSON", Err: err}
	}
	h = stored.header
	if h.Kind != s.Kind {
		return h, 0, &CorruptError{Path: path, Offset: magicLen, Reason: fmt.Sprintf("kind %q, want %q", h.Kind, s.Kind)}
	}
	if len(stored.Version) == 0 || string(stored.Version) == "null" {
		return h, 0, &CorruptError{Path: path, Offset: magicLen, Reason: "header has no format version"}
	}
	if err := json.Unmarshal(stored.Version, &h.Version); err != nil {
		if isUnsignedInteger(stored.Version) {
			// A version too large for an int is still a version: newer
			// than any this code supports, so refused and never moved.
			h.Version = math.MaxInt
			return h, 0, &NewerVersionError{Path: path, Kind: h.Kind, Version: h.Version, Stored: string(stored.Version), Supported: s.Version}
		}
		return h, 0, &CorruptError{Path: path, Offset: magicLen, Reason: fmt.Sprintf("header format version %.40s is not an integer", stored.Version), Err: err}
	}
	if h.Version < 0 {
		return h, 0, &CorruptError{Path: path, Offset: magicLen, Reason: fmt.Sprintf("format version %d is negative", h.Version)}
	}
	if h.Version > s.Version {
		return h, 0, &NewerVersionError{Path: path, Kind: h.Kind, Version: h.Version, Supported: s.Version}
	}
	return h, next, nil
}

// isUnsignedInteger reports whether a JSON value is a number in integer
// form without a sign: digits only, no leading zero, no fraction, no
// exponent. Writers spell versions that way, so a value of that form that
// does not fit an int is a large version, not damage.
func isUnsignedInteger(v []byte) bool {
	if len(v) == 0 || (v[0] == '0' && len(v) > 1) {
		return false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func appendHeader(dst []byte, magic string, h header) []byte {
	b, err := json.Marshal(h)
	if err != nil {
		panic(err) // header has only plain fields; cannot fail
	}
	return appendFrame(append(dst, magic...), b)
}
