package lazyfs_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/dranode/dranode/compat/powerloss/lazyfs"
)

// A file written and synced, but whose directory was never synced, does
// not survive a power cut. (Needs root and /dev/fuse, so it is compiled
// but not run by go test.)
func ExampleMount() {
	backing, _ := os.MkdirTemp("", "disk")
	mnt, _ := os.MkdirTemp("", "mnt")
	defer os.RemoveAll(backing)
	defer os.RemoveAll(mnt)

	fsys, err := lazyfs.Mount(backing, mnt, lazyfs.Options{})
	if err != nil {
		log.Fatal(err)
	}
	f, _ := os.Create(filepath.Join(mnt, "state"))
	f.WriteString("acknowledged?")
	f.Sync() // the data is durable, the name is not: the directory was not synced
	f.Close()

	// kill would SIGKILL the processes using the mount; none here.
	cut, err := fsys.CutPower(func() error { return nil })
	if err != nil {
		log.Fatal(err)
	}
	_, err = os.Stat(filepath.Join(backing, "state"))
	fmt.Println(cut.Dropped, "name dropped;", os.IsNotExist(err))
}
