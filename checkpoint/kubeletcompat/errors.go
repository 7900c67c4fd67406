package kubeletcompat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/dranode/dranode/checkpoint"
)

var (
	// ErrChecksumMismatch is wrapped in the *checkpoint.CorruptError returned
	// when the stored checksum does not match the stored data.
	ErrChecksumMismatch = errors.New("checksum mismatch")

	// ErrUnknownFormat matches every *UnknownFormatError.
	ErrUnknownFormat = errors.New("kubeletcompat: unknown checkpoint format")
)

// ChecksumError details a checksum mismatch. It is the Err of the
// *checkpoint.CorruptError returned, and matches ErrChecksumMismatch.
type ChecksumError struct {
	Stored   uint64 // the checksum found in the file
	Computed uint64 // the checksum of the data found in the file
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("checksum mismatch: stored %d, computed %d", e.Stored, e.Computed)
}

// Is makes errors.Is(err, ErrChecksumMismatch) true.
func (e *ChecksumError) Is(target error) bool { return target == ErrChecksumMismatch }

// UnknownFormatError reports a file that decodes but is not a layout this
// package knows, such as a DRA checkpoint of another API version, or an
// older layout. Such a file is not necessarily damaged, so this is not a
// checkpoint.ErrCorrupt.
type UnknownFormatError struct {
	Path   string // the file, empty when decoding bytes
	File   string // which kubelet file was expected, e.g. "dra_manager_state"
	Detail string // what was found instead
}

func (e *UnknownFormatError) Error() string {
	where := e.Path
	if where == "" {
		where = "data"
	}
	return fmt.Sprintf("kubeletcompat: %s is not a %s checkpoint this package can read: %s", where, e.File, e.Detail)
}

// Is makes errors.Is(err, ErrUnknownFormat) true.
func (e *UnknownFormatError) Is(target error) bool { return target == ErrUnknownFormat }

// jsonError turns a decoding failure into the CorruptError callers match on:
// input that ends early is reported as truncated (wrapping
// io.ErrUnexpectedEOF), anything else as undecodable with the offset the
// decoder stopped at. Offsets are file offsets only for the outer document
// (inFile); for JSON embedded in a string field they would point nowhere in
// the file, so the CorruptError carries offset 0 and the decoder's message
// keeps the offset within the field.
func jsonError(path string, data []byte, what string, inFile bool, err error) error {
	at := func(offset int64) int64 {
		if inFile {
			return offset
		}
		return 0
	}
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case len(bytes.TrimSpace(data)) == 0:
		return &checkpoint.CorruptError{Path: path, Reason: what + " is empty", Err: io.ErrUnexpectedEOF}
	case errors.As(err, &syntax) && syntax.Offset >= int64(len(data)):
		return &checkpoint.CorruptError{Path: path, Offset: at(syntax.Offset), Reason: what + " is truncated", Err: fmt.Errorf("%w: %v", io.ErrUnexpectedEOF, err)}
	case errors.As(err, &syntax):
		return &checkpoint.CorruptError{Path: path, Offset: at(syntax.Offset), Reason: what + " is not valid JSON", Err: err}
	case errors.As(err, &typeErr):
		return &checkpoint.CorruptError{Path: path, Offset: at(typeErr.Offset), Reason: what + " has a value of the wrong type", Err: err}
	default:
		return &checkpoint.CorruptError{Path: path, Reason: what + " cannot be decoded", Err: err}
	}
}
