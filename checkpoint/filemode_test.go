package checkpoint_test

import (
	"io/fs"
	"testing"

	"github.com/dranode/dranode/checkpoint"
)

func TestDescribeFileMode(t *testing.T) {
	for _, tc := range []struct {
		mode fs.FileMode
		want string
	}{
		{0o644, "a regular file"},
		{fs.ModeDir | 0o755, "a directory"},
		{fs.ModeNamedPipe | 0o600, "a named pipe (FIFO)"},
		{fs.ModeSocket | 0o600, "a socket"},
		{fs.ModeDevice | fs.ModeCharDevice | 0o666, "a character device"},
		{fs.ModeDevice | 0o660, "a block device"},
		{fs.ModeSymlink | 0o777, "a symbolic link"},
		{fs.ModeIrregular, "a file of mode ?---------"},
	} {
		if got := checkpoint.DescribeFileMode(tc.mode); got != tc.want {
			t.Errorf("DescribeFileMode(%v) = %q, want %q", tc.mode, got, tc.want)
		}
	}
}
