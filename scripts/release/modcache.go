package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// openSharedModCache returns the module cache that apicheck keeps across
// runs, locked for this run, with none of this repository's modules in it.
// A scratch cache per run made every run extract each third-party module
// again (the slowest part of apicheck); those never change under a version
// (the checksum database vouches for them), while this repository's
// pending versions are zipped from the working tree and change between
// runs, so they are evicted first. The lock keeps two runs (make check and
// the release tool's own tests) from evicting each other's.
//
// DRANODE_APICHECK_MODCACHE names the directory; the default is
// ${XDG_CACHE_HOME:-$HOME/.cache}/dranode/apicheck-modcache.
func openSharedModCache() (dir string, unlock func(), err error) {
	dir = os.Getenv("DRANODE_APICHECK_MODCACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", nil, fmt.Errorf("apicheck module cache: %w", err)
		}
		dir = filepath.Join(base, "dranode", "apicheck-modcache")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("apicheck module cache: %w", err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("apicheck module cache: %w", err)
	}
	for {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		lock.Close()
		return "", nil, fmt.Errorf("apicheck module cache: lock %s: %w", lock.Name(), err)
	}
	if err := evictOwnModules(dir); err != nil {
		lock.Close()
		return "", nil, err
	}
	return dir, func() { lock.Close() }, nil
}

// evictOwnModules removes this repository's modules, extracted and
// downloaded, from the module cache dir.
func evictOwnModules(dir string) error {
	own := filepath.FromSlash(strings.TrimSuffix(pathPrefix, "/"))
	for _, d := range []string{filepath.Join(dir, own), filepath.Join(dir, "cache", "download", own)} {
		// Extracted modules are read-only unless -modcacherw made them.
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				_ = os.Chmod(p, 0o755)
			}
			return nil
		})
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("apicheck module cache: evicting %s: %w", d, err)
		}
	}
	return nil
}
