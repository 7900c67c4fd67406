package kubeletcompat

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/dranode/dranode/checkpoint"
)

// MaxCheckpointSize is the largest kubelet checkpoint file the readers
// accept. The kubelet's checkpoint manager sets no limit and decodes files
// whole, so neither can a reader stream them; what they hold (a node's
// prepared claims, its device plugin assignments) is kilobytes, so a file
// this large is not one the kubelet wrote.
const MaxCheckpointSize = 64 << 20

var (
	// ErrNotRegular means the path names something other than a regular
	// file (a device such as /dev/zero, a FIFO, a socket, a directory): it
	// is refused before it is read, or opened at all when it can be told
	// from its name.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge means the file holds more than MaxCheckpointSize bytes.
	ErrTooLarge = errors.New("larger than a kubelet checkpoint can be")
)

// readCheckpoint reads the regular file at path whole, refusing anything
// else and any file larger than MaxCheckpointSize. Its errors are
// *fs.PathError naming the path, with op saying what was being read.
func readCheckpoint(path, what string) ([]byte, error) {
	op := "kubeletcompat: read " + what
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("kubeletcompat: read %s: %w", what, err)
	}
	if err := checkRegular(st); err != nil {
		return nil, &fs.PathError{Op: op, Path: path, Err: err}
	}
	// Opened without blocking and checked again: a FIFO that replaced the
	// file since the Stat must not wait for a writer, nor a device be read.
	f, err := openNonBlocking(path)
	if err != nil {
		return nil, fmt.Errorf("kubeletcompat: read %s: %w", what, err)
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, &fs.PathError{Op: op, Path: path, Err: err}
	}
	if err := checkRegular(st); err != nil {
		return nil, &fs.PathError{Op: op, Path: path, Err: err}
	}
	// The limit holds even if the file grows while it is read.
	data, err := io.ReadAll(io.LimitReader(f, MaxCheckpointSize+1))
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: path, Err: err}
	}
	if len(data) > MaxCheckpointSize {
		return nil, &fs.PathError{Op: op, Path: path, Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, MaxCheckpointSize)}
	}
	return data, nil
}

func checkRegular(st fs.FileInfo) error {
	switch {
	case !st.Mode().IsRegular():
		return fmt.Errorf("%w: %s", ErrNotRegular, checkpoint.DescribeFileMode(st.Mode()))
	case st.Size() > MaxCheckpointSize:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, st.Size(), MaxCheckpointSize)
	}
	return nil
}
