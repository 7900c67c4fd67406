package hostlock

// SetPath points the package at a lock file of the test's own, so that its
// tests never wait for (or block) a real host-wide test elsewhere.
func SetPath(p string) { path = p }
