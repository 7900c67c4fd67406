package lazyfs

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// ErrUnavailable is matched by Available's and Mount's error when this
// process cannot mount a FUSE file system (not root, or no /dev/fuse).
var ErrUnavailable = errors.New("lazyfs: FUSE mounts are unavailable")

// Available reports whether Mount can work here: the process must be root
// (the mount is made with mount(2), without fusermount) and /dev/fuse must
// exist. The error says which is missing.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not running as root (euid %d)", ErrUnavailable, os.Geteuid())
	}
	st, err := os.Stat("/dev/fuse")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if st.Mode()&fs.ModeCharDevice == 0 {
		return fmt.Errorf("%w: /dev/fuse is not a character device", ErrUnavailable)
	}
	return nil
}

// Options configure Mount. The zero value is a faithful model of a disk:
// fsyncs make data and entries durable, a cut discards the rest.
type Options struct {
	// FailAt, when positive, stops the file system before its FailAt-th
	// mutating operation (counted from 1 since Mount, see Op): that
	// operation is not performed, it and every later operation block, and
	// Frozen is closed. CutPower then discards what was not durable.
	FailAt int
	// StopAt, if set, is asked about every mutating operation before it
	// is performed (with the last one performed, nil at first); the first
	// time it returns true the file system stops there, as with FailAt.
	// It runs with the file system locked and must not use it.
	StopAt func(last *Op, op Op) bool
	// IgnoreFsync makes fsync and fdatasync of regular files succeed
	// without making their data durable: the file system of a writer that
	// skipped its fsyncs. For proving that a test catches lost data.
	IgnoreFsync bool
	// IgnoreDirFsync does the same for fsync of directories: no create,
	// rename or removal ever becomes durable.
	IgnoreDirFsync bool
	// Torn makes a power cut keep, for every durable file whose current
	// data extends its durable data, a random prefix (possibly empty, at
	// byte granularity) of the extension: unsynced appends that a disk had
	// partly written back. Seed seeds the choice.
	Torn bool
	Seed uint64
	// Trace keeps every mutating operation for Trace.
	Trace bool
}

// OpKind names a mutating operation.
type OpKind string

// The mutating operations. Everything else (lookups, reads, opening without
// O_TRUNC, closing, listing) changes nothing that a power cut could lose.
const (
	OpCreate   OpKind = "create"
	OpMkdir    OpKind = "mkdir"
	OpWrite    OpKind = "write"
	OpTruncate OpKind = "truncate" // ftruncate, truncate, open with O_TRUNC
	OpChmod    OpKind = "chmod"
	OpFsync    OpKind = "fsync"
	OpFsyncDir OpKind = "fsyncdir"
	OpRename   OpKind = "rename"
	OpUnlink   OpKind = "unlink"
	OpRmdir    OpKind = "rmdir"
)

// Op is one mutating operation.
type Op struct {
	// Index counts mutating operations from 1 since Mount, in the order
	// the file system served them (one at a time).
	Index int
	Kind  OpKind
	// Path is relative to the mount's root, slash-separated; "." is the
	// root. For a file handle whose name was removed, it is the last name.
	Path string
	// To is the target of a rename.
	To string
	// Size is the number of bytes of a write, or the new size of a
	// truncate.
	Size int64
}

func (o Op) String() string {
	s := fmt.Sprintf("#%d %s %s", o.Index, o.Kind, o.Path)
	switch o.Kind {
	case OpRename:
		s += " -> " + o.To
	case OpWrite, OpTruncate:
		s += fmt.Sprintf(" (%d bytes)", o.Size)
	}
	return s
}

// Cut describes a power cut.
type Cut struct {
	// Ops is the number of mutating operations performed before the cut.
	Ops int
	// Last is the last operation performed (nil if none was).
	Last *Op
	// Stopped is the first operation that was stopped instead of performed
	// (by FailAt, StopAt or after Freeze); nil if no operation was
	// waiting. Its Index is Ops+1.
	Stopped *Op
	// Dropped counts names present before the cut that the durable state
	// does not have; Resurrected counts names the durable state has that
	// were removed or renamed away; Reverted counts files whose data went
	// back to an earlier state (or was cut short).
	Dropped, Resurrected, Reverted int
}

// object is a file or directory of the model. Objects are never reused: a
// new file gets a new object even where the backing file system would
// reuse an inode number, so durable state is never confused between files.
type object struct {
	id  uint64
	dir bool

	// Live state: where the object is now (parent nil once removed, and
	// for the root), and for a directory its entries.
	parent *object
	name   string
	live   map[string]*object

	// Durable state: a directory's entries as of its last fsync; a file's
	// data and mode as of its last fsync. A new directory's durable entries
	// are empty, a new file's data is empty.
	durEntries map[string]*object
	durData    []byte
	mode       uint32
}

// FS is a mounted lazyfs.
type FS struct {
	backing string
	mnt     string
	opts    Options
	server  *fuse.Server

	mu       sync.Mutex
	cond     sync.Cond
	root     *object
	nextID   uint64
	ops      int
	last     *Op
	stopped  *Op
	frozen   bool
	released bool // stopped operations may now fail with EIO
	dead     bool // unmounted: nothing may touch the backing directory
	trace    []Op
	frozenCh chan struct{}
}

// Mount mounts a lazyfs at mountpoint, passing operations through to the
// backing directory. Everything under backing at this moment is durable: a
// mount starts where the last power cut (or a clean shutdown) left the
// disk. Symbolic links and special files under backing are refused.
func Mount(backing, mountpoint string, opts Options) (*FS, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if opts.FailAt < 0 {
		return nil, fmt.Errorf("lazyfs: Options.FailAt is %d; want 0 (never) or an operation index from 1", opts.FailAt)
	}
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: backing directory: %w", err)
	}
	f := &FS{backing: backing, mnt: mountpoint, opts: opts, nextID: 1, frozenCh: make(chan struct{})}
	f.cond.L = &f.mu
	f.root, err = f.scan(backing, true)
	if err != nil {
		return nil, err
	}
	// Cached attributes and entries are safe: every change to the backing
	// directory while mounted goes through this file system.
	timeout := time.Second
	server, err := gofs.Mount(mountpoint, &node{fs: f, obj: f.root}, &gofs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            "lazyfs:" + backing,
			Name:              "lazyfs",
			DisableXAttrs:     true,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s: %w", mountpoint, err)
	}
	f.server = server
	return f, nil
}

// scan builds the model of what is under path, all of it durable.
func (f *FS) scan(path string, isRoot bool) (*object, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: scan backing directory: %w", err)
	}
	o := &object{id: f.nextID, mode: uint32(st.Mode().Perm())}
	f.nextID++
	switch {
	case st.IsDir():
		o.dir = true
		o.live = map[string]*object{}
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("lazyfs: scan backing directory: %w", err)
		}
		for _, e := range entries {
			c, err := f.scan(filepath.Join(path, e.Name()), false)
			if err != nil {
				return nil, err
			}
			c.parent, c.name = o, e.Name()
			o.live[e.Name()] = c
		}
		o.durEntries = cloneEntries(o.live)
	case st.Mode().IsRegular():
		if isRoot {
			return nil, fmt.Errorf("lazyfs: backing %s is not a directory", path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("lazyfs: scan backing directory: %w", err)
		}
		o.durData = data
	default:
		return nil, fmt.Errorf("lazyfs: backing directory holds %s, of type %s: only regular files and directories are supported", path, st.Mode().Type())
	}
	return o, nil
}

func cloneEntries(m map[string]*object) map[string]*object {
	out := make(map[string]*object, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Mountpoint returns where the file system is mounted.
func (f *FS) Mountpoint() string { return f.mnt }

// Frozen is closed once the file system stops serving: at the FailAt-th
// mutating operation, where StopAt said so, or at Freeze.
func (f *FS) Frozen() <-chan struct{} { return f.frozenCh }

// Freeze stops the file system: every operation from now on (mutating or
// not) blocks until CutPower, which fails it with EIO.
func (f *FS) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.freezeLocked()
}

func (f *FS) freezeLocked() {
	if !f.frozen {
		f.frozen = true
		close(f.frozenCh)
	}
}

// Ops returns the number of mutating operations performed so far.
func (f *FS) Ops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// Trace returns every mutating operation performed so far (only with
// Options.Trace).
func (f *FS) Trace() []Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Op(nil), f.trace...)
}

// mutate admits op, with f.mu held: it returns 0 when op may be performed
// now, and blocks (then returns EIO) when the file system is frozen or op
// is the FailAt-th.
func (f *FS) mutate(op Op) syscall.Errno {
	op.Index = f.ops + 1
	if !f.frozen && ((f.opts.FailAt > 0 && op.Index >= f.opts.FailAt) || (f.opts.StopAt != nil && f.opts.StopAt(f.last, op))) {
		f.freezeLocked()
	}
	if f.frozen || f.dead {
		if f.stopped == nil && !f.dead {
			f.stopped = &op
		}
		return f.blockLocked()
	}
	f.ops++
	f.last = &op
	if f.opts.Trace {
		f.trace = append(f.trace, op)
	}
	return 0
}

// admit lets a non-mutating operation through unless the file system is
// frozen.
func (f *FS) admit() syscall.Errno {
	if f.frozen || f.dead {
		return f.blockLocked()
	}
	return 0
}

func (f *FS) blockLocked() syscall.Errno {
	for !f.released {
		f.cond.Wait()
	}
	return syscall.EIO
}

// CutPower cuts the power: it freezes the file system (if FailAt did not
// already), calls kill, which must make every process using the mount exit
// (SIGKILL; it need not wait), then fails the stopped operations with EIO,
// unmounts, and rebuilds the backing directory to exactly the durable
// state. Operations stopped by the freeze fail only after kill returned, so
// a killed writer never sees their results. The FS cannot be used again;
// Mount the backing directory anew to go on.
func (f *FS) CutPower(kill func() error) (*Cut, error) {
	f.Freeze()
	var errs []error
	if kill != nil {
		if err := kill(); err != nil {
			errs = append(errs, fmt.Errorf("lazyfs: cut power: kill: %w", err))
		}
	}
	f.mu.Lock()
	f.released = true
	f.cond.Broadcast()
	f.mu.Unlock()
	if err := f.unmount(); err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dead = true
	cut, err := f.rebuildLocked()
	if err != nil {
		errs = append(errs, err)
	}
	return cut, errors.Join(errs...)
}

// Unmount unmounts without a power cut: everything written stays in the
// backing directory, durable or not, as after a clean shutdown.
func (f *FS) Unmount() error {
	f.mu.Lock()
	f.released = true
	f.cond.Broadcast()
	f.mu.Unlock()
	err := f.unmount()
	f.mu.Lock()
	f.dead = true
	f.mu.Unlock()
	return err
}

// unmount waits for the processes that had files open to let go of them
// (the kernel closes a killed process's files asynchronously), then waits
// for the server to stop.
func (f *FS) unmount() error {
	if f.server == nil {
		return nil
	}
	var err error
	for wait := time.Millisecond; wait < 10*time.Second; wait *= 2 {
		if err = f.server.Unmount(); err == nil {
			f.server.Wait()
			f.server = nil
			return nil
		}
		time.Sleep(wait)
	}
	// Something still holds the mount: detach it so that the tree is
	// usable, and report it.
	derr := syscall.Unmount(f.mnt, syscall.MNT_DETACH)
	return fmt.Errorf("lazyfs: unmount %s: %w (lazily detached: %v)", f.mnt, err, derr)
}

// relPath is o's path relative to the root, "." for the root.
func relPath(o *object) string {
	if o.parent == nil {
		return "."
	}
	var parts []string
	for p := o; p.parent != nil; p = p.parent {
		parts = append(parts, p.name)
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, "/")
}

func (f *FS) linked(o *object) bool {
	for p := o; ; p = p.parent {
		if p == f.root {
			return true
		}
		if p.parent == nil {
			return false
		}
	}
}

func (f *FS) backingPath(o *object) string {
	return filepath.Join(f.backing, filepath.FromSlash(relPath(o)))
}

// rebuildLocked replaces the backing directory's contents with the durable
// state.
func (f *FS) rebuildLocked() (*Cut, error) {
	cut := &Cut{Ops: f.ops, Last: f.last, Stopped: f.stopped}
	rng := rand.New(rand.NewPCG(f.opts.Seed, uint64(f.ops)))

	// What each durable file will hold, decided before anything changes.
	type plan struct {
		path string
		obj  *object
	}
	var plans []plan
	durable := map[string]bool{}
	data := map[*object][]byte{}
	visited := map[*object]bool{}
	var walk func(dir *object, rel string)
	walk = func(dir *object, rel string) {
		visited[dir] = true
		for _, name := range sortedNames(dir.durEntries) {
			c := dir.durEntries[name]
			p := pathJoin(rel, name)
			if c.dir && visited[c] {
				continue // a directory renamed between two synced parents: keep one copy
			}
			durable[p] = true
			plans = append(plans, plan{p, c})
			if c.dir {
				walk(c, p)
				continue
			}
			if _, done := data[c]; done {
				continue
			}
			d := c.durData
			if f.linked(c) {
				now, err := os.ReadFile(f.backingPath(c))
				if err == nil && f.opts.Torn && len(now) > len(d) && string(now[:len(d)]) == string(d) {
					d = now[:len(d)+rng.IntN(len(now)-len(d)+1)]
				}
				if err == nil && string(now) != string(d) {
					cut.Reverted++
				}
			}
			data[c] = d
		}
	}
	walk(f.root, ".")
	live := map[string]bool{}
	var walkLive func(dir *object, rel string)
	walkLive = func(dir *object, rel string) {
		for name, c := range dir.live {
			p := pathJoin(rel, name)
			live[p] = true
			if c.dir {
				walkLive(c, p)
			}
		}
	}
	walkLive(f.root, ".")
	for p := range live {
		if !durable[p] {
			cut.Dropped++
		}
	}
	for p := range durable {
		if !live[p] {
			cut.Resurrected++
		}
	}

	entries, err := os.ReadDir(f.backing)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: rebuild: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(f.backing, e.Name())); err != nil {
			return nil, fmt.Errorf("lazyfs: rebuild: %w", err)
		}
	}
	first := map[*object]string{}
	for _, pl := range plans {
		full := filepath.Join(f.backing, filepath.FromSlash(pl.path))
		switch {
		case pl.obj.dir:
			err = os.Mkdir(full, fs.FileMode(pl.obj.mode))
		case first[pl.obj] != "":
			// One file under two durable names (a rename whose source
			// and target directories were both synced, only one of them
			// after it): the same inode, as on a real file system.
			err = os.Link(first[pl.obj], full)
		default:
			first[pl.obj] = full
			err = os.WriteFile(full, data[pl.obj], fs.FileMode(pl.obj.mode))
		}
		if err == nil {
			// WriteFile and Mkdir apply the umask; the model's mode wins.
			err = os.Chmod(full, fs.FileMode(pl.obj.mode))
		}
		if err != nil {
			return nil, fmt.Errorf("lazyfs: rebuild: %w", err)
		}
	}
	return cut, nil
}

func pathJoin(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

func sortedNames(m map[string]*object) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
