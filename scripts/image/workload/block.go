package workload

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The environment variables that ask the workload program for a block
// device probe: BlockEnv names the device (a path, or a glob whose first
// match is taken, for a device whose name the test does not know, such as
// "/dev/loop.example.com/disk-*"), BlockPatternEnv what to write.
const (
	BlockEnv        = "WORKLOAD_BLOCK"
	BlockPatternEnv = "WORKLOAD_BLOCK_PATTERN"
)

// Block is what a container could do with a block device: whether it
// could open it read-write (a device cgroup that does not allow the
// device refuses the open with EPERM even to root), whether the device
// read zeros where the pattern goes before it was written, and what it
// read back after writing the pattern.
type Block struct {
	// Path is the device probed.
	Path string `json:"path"`
	// OpenError is why the read-write open failed; empty when it worked.
	OpenError string `json:"openError,omitempty"`
	// ZerosBefore says the bytes where the pattern goes read as zeros
	// before the probe wrote anything.
	ZerosBefore bool `json:"zerosBefore"`
	// ReadBack is what was read where the pattern was written, after
	// writing and flushing it; empty without a pattern.
	ReadBack string `json:"readBack,omitempty"`
	// Error is any other failure (read, write, flush).
	Error string `json:"error,omitempty"`
}

// ProbeBlock opens the device path names (a path or a glob) read-write,
// reads where pattern goes, writes pattern at offset 0, flushes it and
// reads it back. Every failure is recorded in the result, never returned:
// a refused open is what some probes are for.
func ProbeBlock(path, pattern string) *Block {
	b := &Block{Path: path}
	if matches, err := filepath.Glob(path); err == nil && len(matches) > 0 {
		b.Path = matches[0]
	}
	f, err := os.OpenFile(b.Path, os.O_RDWR, 0)
	if err != nil {
		b.OpenError = err.Error()
		return b
	}
	defer f.Close()
	n := max(len(pattern), 4096)
	before := make([]byte, n)
	if _, err := f.ReadAt(before, 0); err != nil {
		b.Error = fmt.Sprintf("reading: %v", err)
		return b
	}
	b.ZerosBefore = !bytes.ContainsFunc(before, func(r rune) bool { return r != 0 })
	if pattern == "" {
		return b
	}
	if _, err := f.WriteAt([]byte(pattern), 0); err != nil {
		b.Error = fmt.Sprintf("writing: %v", err)
		return b
	}
	if err := f.Sync(); err != nil {
		b.Error = fmt.Sprintf("flushing: %v", err)
		return b
	}
	back := make([]byte, len(pattern))
	if _, err := f.ReadAt(back, 0); err != nil {
		b.Error = errors.Join(errors.New("reading back"), err).Error()
		return b
	}
	b.ReadBack = string(back)
	return b
}
