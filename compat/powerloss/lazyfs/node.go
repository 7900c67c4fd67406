package lazyfs

import (
	"context"
	"io"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node serves one object. Every method takes the FS lock for its whole
// duration, backing system call included, so operations happen one at a
// time in a single order: the order Op.Index counts and FailAt cuts.
//
// Only the interfaces below are implemented; go-fuse answers every other
// operation (links, special files, xattrs, fallocate, copy_file_range,
// O_TMPFILE) with an error without touching the backing directory, so the
// model cannot miss a change.
type node struct {
	gofs.Inode
	fs  *FS
	obj *object
}

var (
	_ gofs.NodeLookuper  = (*node)(nil)
	_ gofs.NodeGetattrer = (*node)(nil)
	_ gofs.NodeSetattrer = (*node)(nil)
	_ gofs.NodeOpener    = (*node)(nil)
	_ gofs.NodeCreater   = (*node)(nil)
	_ gofs.NodeReader    = (*node)(nil)
	_ gofs.NodeWriter    = (*node)(nil)
	_ gofs.NodeFsyncer   = (*node)(nil)
	_ gofs.NodeFlusher   = (*node)(nil)
	_ gofs.NodeReleaser  = (*node)(nil)
	_ gofs.NodeMkdirer   = (*node)(nil)
	_ gofs.NodeRmdirer   = (*node)(nil)
	_ gofs.NodeUnlinker  = (*node)(nil)
	_ gofs.NodeRenamer   = (*node)(nil)
	_ gofs.NodeReaddirer = (*node)(nil)
	_ gofs.NodeStatfser  = (*node)(nil)
)

// handle is an open regular file: a descriptor of the backing file, which
// keeps working after the name is removed, as on any file system.
type handle struct {
	fd   int
	obj  *object
	name string // relative path when opened, for Op.Path after removal
}

func (n *node) lock() func() {
	n.fs.mu.Lock()
	return n.fs.mu.Unlock
}

func errno(err error) syscall.Errno { return gofs.ToErrno(err) }

func stableAttr(o *object) gofs.StableAttr {
	mode := uint32(syscall.S_IFREG)
	if o.dir {
		mode = syscall.S_IFDIR
	}
	return gofs.StableAttr{Mode: mode, Ino: o.id}
}

func (n *node) child(ctx context.Context, o *object) *gofs.Inode {
	return n.NewInode(ctx, &node{fs: n.fs, obj: o}, stableAttr(o))
}

func (n *node) fill(o *object, fd int, out *fuse.Attr) syscall.Errno {
	var st syscall.Stat_t
	var err error
	if fd >= 0 {
		err = syscall.Fstat(fd, &st)
	} else {
		if !n.fs.linked(o) {
			return syscall.ENOENT
		}
		err = syscall.Lstat(n.fs.backingPath(o), &st)
	}
	if err != nil {
		return errno(err)
	}
	out.FromStat(&st)
	out.Ino = o.id
	return 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	defer n.lock()()
	if e := n.fs.admit(); e != 0 {
		return nil, e
	}
	c := n.obj.live[name]
	if c == nil {
		return nil, syscall.ENOENT
	}
	if e := n.fill(c, -1, &out.Attr); e != 0 {
		return nil, e
	}
	return n.child(ctx, c), 0
}

func fdOf(fh gofs.FileHandle) int {
	if h, ok := fh.(*handle); ok {
		return h.fd
	}
	return -1
}

func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	defer n.lock()()
	if e := n.fs.admit(); e != 0 {
		return e
	}
	return n.fill(n.obj, fdOf(fh), &out.Attr)
}

func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	defer n.lock()()
	fd := fdOf(fh)
	path := n.fs.backingPath(n.obj)
	if fd < 0 && !n.fs.linked(n.obj) {
		return syscall.ENOENT
	}
	if mode, ok := in.GetMode(); ok {
		if e := n.fs.mutate(Op{Kind: OpChmod, Path: relPath(n.obj)}); e != 0 {
			return e
		}
		var err error
		if fd >= 0 {
			err = syscall.Fchmod(fd, mode&07777)
		} else {
			err = syscall.Chmod(path, mode&07777)
		}
		if err != nil {
			return errno(err)
		}
		// Metadata is durable when the file's data is: recorded at fsync
		// for files; a directory keeps it (mode changes of directories are
		// not used by anything tested here).
		if n.obj.dir {
			n.obj.mode = mode & 07777
		}
	}
	if size, ok := in.GetSize(); ok {
		if e := n.fs.mutate(Op{Kind: OpTruncate, Path: relPath(n.obj), Size: int64(size)}); e != 0 {
			return e
		}
		var err error
		if fd >= 0 {
			err = syscall.Ftruncate(fd, int64(size))
		} else {
			err = syscall.Truncate(path, int64(size))
		}
		if err != nil {
			return errno(err)
		}
	}
	if e := n.fs.admit(); e != 0 {
		return e
	}
	// Owners are passed through but not modelled, times are ignored:
	// nothing tested depends on either.
	if uid, ok := in.GetUID(); ok {
		gid, _ := in.GetGID()
		if err := os.Lchown(path, int(uid), int(gid)); err != nil {
			return errno(err)
		}
	}
	return n.fill(n.obj, fd, &out.Attr)
}

// openFlags are the flags a backing file is opened with. It is always
// opened for reading and writing, so that Fsync can read what it makes
// durable (the server runs as root). O_APPEND is dropped: the kernel already
// turned an append into a write at the end of the file it knows, and
// passes that offset.
func openFlags(flags uint32) int {
	return int(flags)&^(syscall.O_ACCMODE|syscall.O_APPEND|syscall.O_CREAT|syscall.O_EXCL) | syscall.O_RDWR | syscall.O_CLOEXEC
}

func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	defer n.lock()()
	if !n.fs.linked(n.obj) {
		return nil, 0, syscall.ENOENT
	}
	if flags&syscall.O_TRUNC != 0 {
		if e := n.fs.mutate(Op{Kind: OpTruncate, Path: relPath(n.obj)}); e != 0 {
			return nil, 0, e
		}
	} else if e := n.fs.admit(); e != 0 {
		return nil, 0, e
	}
	fd, err := syscall.Open(n.fs.backingPath(n.obj), openFlags(flags), 0)
	if err != nil {
		return nil, 0, errno(err)
	}
	return &handle{fd: fd, obj: n.obj, name: relPath(n.obj)}, 0, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	defer n.lock()()
	if !n.fs.linked(n.obj) {
		return nil, nil, 0, syscall.ENOENT
	}
	if e := n.fs.mutate(Op{Kind: OpCreate, Path: pathJoin(relPath(n.obj), name)}); e != 0 {
		return nil, nil, 0, e
	}
	o := n.fs.newObject(false, mode&07777)
	o.parent, o.name = n.obj, name
	path := n.fs.backingPath(o)
	fd, err := syscall.Open(path, openFlags(flags)|syscall.O_CREAT|syscall.O_EXCL, mode&07777)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	if old := n.obj.live[name]; old != nil {
		old.parent = nil // O_EXCL said it was not there; keep the model honest anyway
	}
	n.obj.live[name] = o
	if e := n.fill(o, fd, &out.Attr); e != 0 {
		syscall.Close(fd)
		return nil, nil, 0, e
	}
	return n.child(ctx, o), &handle{fd: fd, obj: o, name: relPath(o)}, 0, 0
}

func (f *FS) newObject(dir bool, mode uint32) *object {
	o := &object{id: f.nextID, dir: dir, mode: mode}
	f.nextID++
	if dir {
		o.live = map[string]*object{}
		o.durEntries = map[string]*object{}
	}
	return o
}

func (n *node) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	defer n.lock()()
	if e := n.fs.admit(); e != 0 {
		return nil, e
	}
	h, ok := fh.(*handle)
	if !ok {
		return nil, syscall.EBADF
	}
	m, err := syscall.Pread(h.fd, dest, off)
	if err != nil {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:m]), 0
}

func (n *node) Write(ctx context.Context, fh gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	defer n.lock()()
	h, ok := fh.(*handle)
	if !ok {
		return 0, syscall.EBADF
	}
	if e := n.fs.mutate(Op{Kind: OpWrite, Path: n.handlePath(h), Size: int64(len(data))}); e != 0 {
		return 0, e
	}
	m, err := syscall.Pwrite(h.fd, data, off)
	if err != nil {
		return uint32(max(m, 0)), errno(err)
	}
	return uint32(m), 0
}

func (n *node) handlePath(h *handle) string {
	if n.fs.linked(h.obj) {
		return relPath(h.obj)
	}
	return h.name
}

// Fsync makes a file's data, or a directory's entries, durable.
func (n *node) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	defer n.lock()()
	if n.obj.dir {
		if e := n.fs.mutate(Op{Kind: OpFsyncDir, Path: relPath(n.obj)}); e != 0 {
			return e
		}
		if !n.fs.opts.IgnoreDirFsync {
			n.obj.durEntries = cloneEntries(n.obj.live)
		}
		return 0
	}
	h, ok := fh.(*handle)
	if !ok {
		return syscall.EBADF
	}
	if e := n.fs.mutate(Op{Kind: OpFsync, Path: n.handlePath(h)}); e != 0 {
		return e
	}
	if n.fs.opts.IgnoreFsync {
		return 0
	}
	// The backing file need not be synced itself: after a cut the model,
	// not the backing disk, decides what the file holds.
	data, err := readAll(h.fd)
	if err != nil {
		return errno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(h.fd, &st); err != nil {
		return errno(err)
	}
	h.obj.durData = data
	h.obj.mode = st.Mode & 07777
	return 0
}

func readAll(fd int) ([]byte, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, err
	}
	buf := make([]byte, st.Size)
	n := 0
	for n < len(buf) {
		m, err := syscall.Pread(fd, buf[n:], int64(n))
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return nil, io.ErrUnexpectedEOF
		}
		n += m
	}
	return buf, nil
}

func (n *node) Flush(ctx context.Context, fh gofs.FileHandle) syscall.Errno { return 0 }

// Release closes the backing descriptor. It is never stopped by a freeze: a
// killed writer's files are closed by the kernel after it died, and the
// unmount waits for that.
func (n *node) Release(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		return errno(syscall.Close(h.fd))
	}
	return 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	defer n.lock()()
	if !n.fs.linked(n.obj) {
		return nil, syscall.ENOENT
	}
	if e := n.fs.mutate(Op{Kind: OpMkdir, Path: pathJoin(relPath(n.obj), name)}); e != 0 {
		return nil, e
	}
	o := n.fs.newObject(true, mode&07777)
	o.parent, o.name = n.obj, name
	if err := syscall.Mkdir(n.fs.backingPath(o), mode&07777); err != nil {
		return nil, errno(err)
	}
	n.obj.live[name] = o
	if e := n.fill(o, -1, &out.Attr); e != 0 {
		return nil, e
	}
	return n.child(ctx, o), 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, OpRmdir, syscall.Rmdir)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, OpUnlink, syscall.Unlink)
}

func (n *node) remove(name string, kind OpKind, rm func(string) error) syscall.Errno {
	defer n.lock()()
	c := n.obj.live[name]
	if c == nil {
		if e := n.fs.admit(); e != 0 {
			return e
		}
		return syscall.ENOENT
	}
	if e := n.fs.mutate(Op{Kind: kind, Path: relPath(c)}); e != 0 {
		return e
	}
	if err := rm(n.fs.backingPath(c)); err != nil {
		return errno(err)
	}
	delete(n.obj.live, name)
	c.parent = nil
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	defer n.lock()()
	dst, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if flags != 0 {
		// RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT: not used
		// by anything tested here, and not modelled.
		return syscall.EINVAL
	}
	c := n.obj.live[name]
	if c == nil {
		if e := n.fs.admit(); e != 0 {
			return e
		}
		return syscall.ENOENT
	}
	to := pathJoin(relPath(dst.obj), newName)
	if e := n.fs.mutate(Op{Kind: OpRename, Path: relPath(c), To: to}); e != 0 {
		return e
	}
	if err := syscall.Rename(n.fs.backingPath(c), n.fs.backingPath(dst.obj)+"/"+newName); err != nil {
		return errno(err)
	}
	if old := dst.obj.live[newName]; old != nil && old != c {
		old.parent = nil
	}
	delete(n.obj.live, name)
	dst.obj.live[newName] = c
	c.parent, c.name = dst.obj, newName
	return 0
}

func (n *node) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	defer n.lock()()
	if e := n.fs.admit(); e != 0 {
		return nil, e
	}
	var list []fuse.DirEntry
	for _, name := range sortedNames(n.obj.live) {
		c := n.obj.live[name]
		list = append(list, fuse.DirEntry{Name: name, Ino: c.id, Mode: stableAttr(c).Mode})
	}
	return gofs.NewListDirStream(list), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	defer n.lock()()
	if e := n.fs.admit(); e != 0 {
		return e
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(n.fs.backing, &st); err != nil {
		return errno(err)
	}
	out.FromStatfsT(&st)
	return 0
}
