// Package hostlock serializes the tests, in every process on this machine,
// that use something the whole host shares: the kubelet's and containerd's
// host-wide paths (compat/node), the host's loop devices (the loop example
// driver). `go test ./...` runs test packages side by side, and a fresh
// clone's `make check` once failed because two packages started a node on
// the same host paths at the same time; a test that touches such a thing
// holds this lock from before it first looks at the host until after it has
// put the host back.
//
// Holds nest within a process (a package's TestMain may hold the lock while
// its tests and the harness they call take it again), and a child process
// started with Pass shares its parent's hold instead of waiting for it
// forever. The lock is a flock on Path: the kernel drops it when its holder
// dies, so a killed test never leaves the host locked.
package hostlock
