package checkpoint

import "os"

// Lock is an exclusive advisory lock on a file, taken with TryLock. Files
// and Journals hold one on their lock file for as long as they are open;
// other programs (the agent's hand-over, dranodectl's migrate) take the
// same kind of lock so that every holder in the project follows one rule.
type Lock struct {
	f *os.File
}

// Unlock releases the lock. It is safe to call on a nil Lock.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
