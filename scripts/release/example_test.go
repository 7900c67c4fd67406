package main

import (
	"fmt"
	"sort"
)

func ExampleParseVersions() {
	v, err := ParseVersions([]byte(`
module-sets:
  dranode:
    version: v0.1.0
    modules: [cdi, checkpoint, claimcache]
excluded-modules: [examples, tools]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	released := v.Released()
	var dirs []string
	for d := range released {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		fmt.Printf("%s is tagged %s\n", d, TagName(d, released[d]))
	}
	_, err = v.Set("extras")
	fmt.Println(err)
	// Output:
	// cdi is tagged cdi/v0.1.0
	// checkpoint is tagged checkpoint/v0.1.0
	// claimcache is tagged claimcache/v0.1.0
	// unknown module set "extras": versions.yaml defines dranode
}
