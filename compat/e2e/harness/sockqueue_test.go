package harness_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/dranode/dranode/compat/e2e/harness"
)

func TestUnixInputQueuedCountsUnreadBytes(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	before, err := harness.UnixInputQueued(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("a call nobody has read yet")
	if _, err := client.Write(msg); err != nil {
		t.Fatal(err)
	}
	after, err := harness.UnixInputQueued(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before != len(msg) {
		t.Fatalf("queued bytes went from %d to %d after writing %d", before, after, len(msg))
	}
	buf := make([]byte, len(msg))
	if _, err := server.Read(buf); err != nil {
		t.Fatal(err)
	}
	if now, err := harness.UnixInputQueued(os.Getpid()); err != nil || now != before {
		t.Fatalf("queued bytes after reading: %d, %v; want %d", now, err, before)
	}
}
