//go:build !unix

package cli

// holdJournalLock is a no-op where flock does not exist; claimcache.Open
// still refuses a record another process holds.
func holdJournalLock(string) (func(), error) { return func() {}, nil }
