// Package regularfile opens and reads the files dranodectl is pointed at
// without ever blocking on, or reading forever from, something that is not a
// regular file.
//
// A path given on the command line can name a character device (/dev/zero,
// /dev/urandom: endless data), a FIFO without a writer (open blocks until one
// comes), a socket or a directory. Open refuses everything but a regular
// file before opening it, opens it so that a FIFO swapped in meanwhile
// cannot block, and checks the opened file again. Reads are then bounded by
// the size the file had when it was opened, so a file that keeps growing
// (a log being appended to) is read as it was, not chased.
package regularfile
