package fleet

import (
	"os"
	"testing"
	"time"
)

// ReadUsage of the test process itself: memory as the kernel reports it,
// and CPU time that grows, to the nanosecond, while the process works.
func TestReadUsage(t *testing.T) {
	before, err := ReadUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.RSS <= 0 || before.Anon <= 0 || before.Anon > before.RSS {
		t.Errorf("RSS %d, Anon %d: want 0 < Anon <= RSS", before.RSS, before.Anon)
	}
	if before.CPU <= 0 {
		t.Errorf("CPU %v after starting a Go test binary, want more than 0", before.CPU)
	}
	// Work until the scheduler has counted a millisecond more: ticks of
	// /proc/<pid>/stat would show nothing or 10 ms.
	var after Usage
	for sum := 0; ; sum++ {
		if sum%100000 == 0 {
			if after, err = ReadUsage(os.Getpid()); err != nil {
				t.Fatal(err)
			}
			if after.CPU-before.CPU >= time.Millisecond {
				break
			}
		}
	}
	if d := after.CPU - before.CPU; d%(10*time.Millisecond) == 0 {
		t.Errorf("CPU grew by %v, a whole number of 10-ms ticks: not the scheduler's nanosecond count", d)
	}
}

func TestReadUsageOfNoProcess(t *testing.T) {
	// PIDs are at most 2^22 on Linux.
	if _, err := ReadUsage(1 << 23); err == nil {
		t.Error("ReadUsage of a PID that cannot exist succeeded")
	}
}
