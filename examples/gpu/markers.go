package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// markerWatch tells of changes in the directories that decide the GPUs'
// health (the markers' and the host device node's) through inotify, so
// that a marker made or removed, or the device node going, is seen at
// once while the plugin sleeps: polling every second cost a sleeping node
// a wake-up and a stat per GPU each second for nothing, and at every 10 s
// the poll was still a third of the plugin's CPU at rest.
type markerWatch struct {
	f *os.File
	// C receives (without blocking the watch) after every change in the
	// directory; it is closed when the watch ends.
	C chan struct{}
}

// watchDirs watches every dir; Close ends the watch.
func watchDirs(dirs ...string) (*markerWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	// Every way a marker can appear or go: made, removed, renamed in or
	// out, and the directory itself removed or moved.
	const mask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
		unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	for _, dir := range dirs {
		if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("inotify watch of %s: %w", dir, err)
		}
	}
	// Non-blocking, so that the runtime's poller waits for it and Close
	// ends a Read in progress.
	w := &markerWatch{f: os.NewFile(uintptr(fd), "inotify"), C: make(chan struct{}, 1)}
	go w.read()
	return w, nil
}

func (w *markerWatch) read() {
	defer close(w.C)
	buf := make([]byte, 4096)
	for {
		// The events' content does not matter: any change means reading
		// the markers again.
		if _, err := w.f.Read(buf); err != nil {
			// Closed, or the watch is gone: the poll alone sees
			// changes from now on.
			return
		}
		select {
		case w.C <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// Close ends the watch.
func (w *markerWatch) Close() error { return w.f.Close() }
