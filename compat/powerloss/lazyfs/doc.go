// Package lazyfs is a FUSE file system for power-loss tests, in the spirit
// of LazyFS (which etcd's robustness tests use): it passes every operation
// through to a backing directory, keeps track of what a real disk would
// still hold after the power went out, and on command throws the rest away.
//
// A SIGKILL keeps the page cache, so a crash test that only kills its writer
// lets unsynced data survive. Under lazyfs nothing survives a power cut that
// was not made durable, with the weakest ordering a POSIX file system
// allows:
//
//   - a file's data becomes durable at fsync or fdatasync of that file, as
//     it is at that moment (with Options.Torn, a power cut may also keep a
//     random prefix of data appended since, as a disk that wrote back some
//     dirty pages would);
//   - a directory's entries (create, mkdir, rename, unlink, rmdir) become
//     durable at fsync of that directory, all of them at once, and
//     independently of every other directory and of the files' data.
//
// So a file whose entry is durable but whose data never was comes back
// empty, or with the data of its last fsync; a rename whose directory was
// not synced is undone; a removed file whose removal was not synced comes
// back with its last synced data.
//
// CutPower stops every further operation, lets the caller kill the writers,
// unmounts and rebuilds the backing directory to exactly the durable state.
// Options.FailAt stops the file system at the Nth mutating operation
// instead, so that a cut lands at a chosen point (mid-rename, between a
// rename and its directory fsync) deterministically.
//
// Only what dranode's durable state needs is supported: regular files and
// directories. Hard links, symbolic links, special files, extended
// attributes and fallocate fail with ENOTSUP, so that nothing changes the
// backing directory behind the model's back. Mounting needs root and
// /dev/fuse (the mount is made with mount(2) directly; fusermount is not
// needed); Available says whether both are there.
package lazyfs
