package checkpoint

import (
	"fmt"
	"io/fs"
)

// DescribeFileMode names the type of file mode describes ("a directory",
// "a named pipe (FIFO)", ...), for errors that refuse a path holding
// something other than the state file it should: the readers of this
// module and dranodectl word it the same way.
func DescribeFileMode(mode fs.FileMode) string {
	switch {
	case mode.IsRegular():
		return "a regular file"
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a block device"
	case mode&fs.ModeSymlink != 0:
		return "a symbolic link"
	default:
		return fmt.Sprintf("a file of mode %s", mode)
	}
}
