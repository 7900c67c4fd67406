//go:build !unix

package kubeletcompat

import "os"

// openNonBlocking opens path read-only; without FIFOs that block an open,
// the check before it is enough.
func openNonBlocking(path string) (*os.File, error) { return os.Open(path) }
