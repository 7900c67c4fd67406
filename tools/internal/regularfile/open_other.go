//go:build !unix

package regularfile

import "os"

// openNonBlocking opens path read-only; without FIFOs that can block an
// open, the check before it is enough.
func openNonBlocking(path string) (*os.File, error) { return os.Open(path) }
