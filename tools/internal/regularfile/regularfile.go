package regularfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/dranode/dranode/checkpoint"
)

var (
	// ErrNotRegular matches every *NotRegularError.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge matches every *TooLargeError.
	ErrTooLarge = errors.New("file too large")
)

// NotRegularError reports a path that names something other than a regular
// file: a directory, device, FIFO, socket or irregular file.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
	// Want says what the path should have been; empty means "a regular file".
	Want string
}

func (e *NotRegularError) Error() string {
	want := e.Want
	if want == "" {
		want = "a regular file"
	}
	return fmt.Sprintf("%s is %s, not %s", e.Path, checkpoint.DescribeFileMode(e.Mode), want)
}

// Is makes errors.Is(err, ErrNotRegular) true.
func (e *NotRegularError) Is(target error) bool { return target == ErrNotRegular }

// TooLargeError reports a file larger than the format read from it allows.
type TooLargeError struct {
	Path  string
	Size  int64 // the file's size
	Limit int64 // the most the format allows
	What  string
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s holds %d bytes, more than the %d a %s can hold", e.Path, e.Size, e.Limit, e.What)
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// File is an open regular file and its size when it was opened.
type File struct {
	*os.File
	size int64
}

// Size is the file's size when it was opened: what Reader reads.
func (f *File) Size() int64 { return f.size }

// Reader reads the file from its start up to Size, whatever is appended
// meanwhile.
func (f *File) Reader() *io.SectionReader { return io.NewSectionReader(f.File, 0, f.size) }

// Check returns a *NotRegularError unless path (after symbolic links) is a
// regular file. It does not open path.
func Check(path string) (fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &NotRegularError{Path: path, Mode: st.Mode()}
	}
	return st, nil
}

// Open opens path for reading if it is a regular file. It checks before
// opening, so that a device or FIFO is never opened, and again on the open
// file, in case path was replaced in between (the open itself does not wait
// for a FIFO's writer).
func Open(path string) (*File, error) {
	if _, err := Check(path); err != nil {
		return nil, err
	}
	f, err := openNonBlocking(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &NotRegularError{Path: path, Mode: st.Mode()}
	}
	return &File{File: f, size: st.Size()}, nil
}

// ReadAll reads the regular file path whole, refusing with a *TooLargeError
// a file of more than limit bytes; what names the format for that error.
func ReadAll(path string, limit int64, what string) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadAll(limit, what)
}

// ReadAll reads the file whole, as it was when opened, refusing with a
// *TooLargeError a file of more than limit bytes.
func (f *File) ReadAll(limit int64, what string) ([]byte, error) {
	if f.size > limit {
		return nil, &TooLargeError{Path: f.Name(), Size: f.size, Limit: limit, What: what}
	}
	data := make([]byte, f.size)
	if _, err := io.ReadFull(f.Reader(), data); err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	return data, nil
}
