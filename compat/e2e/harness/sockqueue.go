package harness

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// WaitForQueuedInput waits until a process that the test stopped (SIGSTOP)
// has unread bytes on one of its Unix sockets: a call sent to it has
// arrived and waits for it. That is the moment a test that kills the
// process "during a call" needs; no pause of a guessed length proves it.
// The process must have had nothing unread when it was stopped (a stopped
// gRPC server reads nothing, and its clients send nothing unasked).
func WaitForQueuedInput(ctx context.Context, pid int, timeout time.Duration) error {
	return Poll(ctx, 5*time.Millisecond, timeout, fmt.Sprintf("a call queued at process %d", pid), func(context.Context) (bool, error) {
		n, err := UnixInputQueued(pid)
		return n > 0, err
	})
}

// UnixInputQueued sums the bytes waiting to be read on the process's Unix
// stream sockets, as the kernel's socket diagnostics (sock_diag, what `ss
// -x` reads) report them.
func UnixInputQueued(pid int) (int, error) {
	inodes, err := socketInodes(pid)
	if err != nil {
		return 0, err
	}
	queued := 0
	err = dumpUnixSockets(func(inode, state, rqueue uint32) {
		const listening = 10 // TCP_LISTEN: rqueue counts pending connections there
		if inodes[inode] && state != listening {
			queued += int(rqueue)
		}
	})
	return queued, err
}

// socketInodes lists the inodes of the sockets the process has open.
func socketInodes(pid int) (map[uint32]bool, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	inodes := map[uint32]bool{}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(target, "socket:[") {
			continue
		}
		ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]"), 10, 32)
		if err == nil {
			inodes[uint32(ino)] = true
		}
	}
	return inodes, nil
}

// Netlink constants of linux/sock_diag.h and linux/unix_diag.h.
const (
	sockDiagByFamily = 20
	udiagShowRQLen   = 0x10
	unixDiagRQLen    = 4
)

// dumpUnixSockets asks the kernel for every Unix socket with its receive
// queue length (NETLINK_SOCK_DIAG, UDIAG_SHOW_RQLEN).
func dumpUnixSockets(each func(inode, state, rqueue uint32)) error {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, syscall.NETLINK_INET_DIAG)
	if err != nil {
		return fmt.Errorf("sock_diag socket: %w", err)
	}
	defer syscall.Close(fd)
	// struct nlmsghdr, then struct unix_diag_req.
	req := make([]byte, syscall.NLMSG_HDRLEN+24)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], sockDiagByFamily)
	ne.PutUint16(req[6:], syscall.NLM_F_REQUEST|syscall.NLM_F_DUMP)
	body := req[syscall.NLMSG_HDRLEN:]
	body[0] = syscall.AF_UNIX
	ne.PutUint32(body[4:], 0xffffffff) // every state
	ne.PutUint32(body[12:], udiagShowRQLen)
	if err := syscall.Sendto(fd, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return fmt.Errorf("sock_diag request: %w", err)
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("sock_diag reply: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("sock_diag reply: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case syscall.NLMSG_DONE:
				return nil
			case syscall.NLMSG_ERROR:
				return fmt.Errorf("sock_diag: the kernel refused the dump")
			}
			parseUnixDiag(m.Data, each)
		}
	}
}

// parseUnixDiag reads one struct unix_diag_msg and its attributes.
func parseUnixDiag(b []byte, each func(inode, state, rqueue uint32)) {
	const msgLen = 16
	if len(b) < msgLen {
		return
	}
	ne := binary.NativeEndian
	state, inode := uint32(b[2]), ne.Uint32(b[4:])
	for a := b[msgLen:]; len(a) >= 4; {
		l, typ := int(ne.Uint16(a[0:])), ne.Uint16(a[2:])
		if l < 4 || l > len(a) {
			return
		}
		if typ == unixDiagRQLen && l >= 12 {
			each(inode, state, ne.Uint32(a[4:]))
		}
		step := (l + 3) &^ 3 // attributes are 4-byte aligned
		if step >= len(a) {
			return
		}
		a = a[step:]
	}
}
