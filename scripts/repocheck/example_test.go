package main

import (
	"fmt"
	"os"
	"path/filepath"
)

func ExampleCode_Missing() {
	root, _ := os.MkdirTemp("", "repocheck-example-")
	defer os.RemoveAll(root)
	os.MkdirAll(filepath.Join(root, "claimcache"), 0o755)
	os.WriteFile(filepath.Join(root, "claimcache", "cache.go"), []byte(`package claimcache

type Cache struct{}

func (c *Cache) LockClaim(uid string) (func(), error) { return func() {}, nil }
`), 0o644)
	code, err := ReadCode(root)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, span := range []string{"Cache.LockClaim", "claimcache.Cache.WithClaim", "Cache.WithClaim(uid, fn)", "kubeletplugin.RollingUpdate", "cleanup.interval"} {
		if why := code.Missing(span); why != "" {
			fmt.Printf("%s: %s\n", span, why)
		} else {
			fmt.Printf("%s: ok or not checked\n", span)
		}
	}
	// Output:
	// Cache.LockClaim: ok or not checked
	// claimcache.Cache.WithClaim: type claimcache.Cache (claimcache) has no method or field WithClaim
	// Cache.WithClaim(uid, fn): no type Cache of the repository has a method or field WithClaim
	// kubeletplugin.RollingUpdate: ok or not checked
	// cleanup.interval: ok or not checked
}
