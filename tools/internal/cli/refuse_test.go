package cli

import (
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// mkfifo makes a named pipe that no process writes to: opening it for
// reading the ordinary way blocks forever.
func mkfifo(t *testing.T, path string) string {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	return path
}

// Every command that reads a file named on its command line refuses a
// device or a FIFO before opening it, naming the path and what it is:
// /dev/zero and /dev/urandom never end, a FIFO without a writer blocks.
func TestRefusesWhatIsNotARegularFile(t *testing.T) {
	fifo := mkfifo(t, filepath.Join(t.TempDir(), "fifo"))
	journal := filepath.Join(t.TempDir(), "claims")
	writeClaimRecord(t, journal)
	if err := os.Remove(filepath.Join(journal, "log.1")); err != nil {
		t.Fatal(err)
	}
	mkfifo(t, filepath.Join(journal, "log.1"))
	gpuConfig := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(gpuConfig, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"checkpoint", "verify", "/dev/zero"}, []string{"/dev/zero is a character device, not a regular file or a directory"}},
		{[]string{"checkpoint", "inspect", "/dev/urandom"}, []string{"/dev/urandom is a character device"}},
		{[]string{"checkpoint", "inspect", fifo}, []string{fifo + " is a named pipe (FIFO)"}},
		{[]string{"checkpoint", "verify", journal}, []string{filepath.Join(journal, "log.1") + " is a named pipe (FIFO)"}},
		{[]string{"checkpoint", "migrate", journal}, []string{"refused, nothing changed", "named pipe"}},
		{[]string{"cdi", "validate", "/dev/zero"}, []string{"/dev/zero is a character device, not a regular file"}},
		{[]string{"cdi", "validate", fifo}, []string{fifo + " is a named pipe (FIFO)"}},
		{[]string{"plugin", "check", "/dev/zero"}, []string{"/dev/zero is a character device"}},
		{[]string{"plugin", "check", "/bin/sh", "--config", fifo}, []string{fifo + " is a named pipe (FIFO)"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := dranodectl(t, tt.args...)
			wantCode(t, r, 1, tt.want...)
		})
	}
}

// A kubelet checkpoint's errors name the file (kubeletcompat's decoders of
// bytes leave the path empty: "corrupt data at offset 0").
func TestKubeletErrorsNameThePath(t *testing.T) {
	tests := []struct {
		name, data, want string
	}{
		{"truncated DRA manager state", `{"Data":"{\"kind\"`, "corrupt %s at offset"},
		{"DRA manager state of another version", `{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"v9\"}","Checksum":` + crcIEEE(`{"kind":"DRACheckpoint","apiVersion":"v9"}`) + `}`, "%s is not a dra_manager_state checkpoint"},
		{"device manager checkpoint, bad checksum", `{"Data":{"PodDeviceEntries":[],"RegisteredDevices":{}},"Checksum":1}`, "corrupt %s at offset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(path, []byte(tt.data), 0o600); err != nil {
				t.Fatal(err)
			}
			r := dranodectl(t, "checkpoint", "verify", path)
			wantCode(t, r, 1, strings.ReplaceAll(tt.want, "%s", path))
		})
	}
}

func crcIEEE(s string) string { return strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(s))), 10) }
