package images_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/dranode/dranode/scripts/image/images"
)

// The names a node's containerd knows the images by after an import.
func ExampleReference() {
	for _, n := range images.Names() {
		ref, err := images.Reference(n, "v0.1.0")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ref)
	}
	// Output:
	// localhost/dranode/dranode-agent:v0.1.0
	// localhost/dranode/pause:v0.1.0
	// localhost/dranode/workload:v0.1.0
}

// A test harness builds the images into its own directory and writes the
// archives a node imports with "ctr -n k8s.io images import".
func ExampleBuild() {
	out, err := os.MkdirTemp("", "images-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(out)
	layouts, err := images.Build(context.Background(), images.Options{Root: "/path/to/dranode", Out: out})
	if err != nil {
		log.Fatal(err)
	}
	for name, l := range layouts {
		tarFile := filepath.Join(out, name+".tar")
		if err := images.ArchiveFile(l.Dir, tarFile); err != nil {
			log.Fatal(err)
		}
		fmt.Println(l.Ref, l.Digest, tarFile)
	}
	plugins, err := images.PluginDigests(layouts[images.Agent].Dir)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range plugins {
		fmt.Printf("drivers[].name=%s sha256=%s\n", p.Name, p.SHA256)
	}
}
