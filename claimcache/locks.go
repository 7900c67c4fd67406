package claimcache

import "sync"

// keyedMutex serializes work per key. A key's mutex lives only while someone
// holds or waits for it, so a node that sees millions of claims over its life
// does not keep a mutex for each.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*refMutex
}

type refMutex struct {
	sync.Mutex
	refs int // holders and waiters; guarded by keyedMutex.mu
}

// lock blocks until the key is free and returns the function that frees it.
func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = make(map[string]*refMutex)
	}
	m := k.locks[key]
	if m == nil {
		m = &refMutex{}
		k.locks[key] = m
	}
	m.refs++
	k.mu.Unlock()

	m.Lock()
	return func() {
		m.Unlock()
		k.mu.Lock()
		m.refs--
		if m.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// held reports how many keys have a live mutex (for tests: it must fall back
// to zero).
func (k *keyedMutex) held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}

// refs reports how many hold or wait for key's mutex (for tests).
func (k *keyedMutex) refs(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if m := k.locks[key]; m != nil {
		return m.refs
	}
	return 0
}
