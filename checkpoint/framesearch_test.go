package checkpoint

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestShiftCRCCombinesChecksums(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// Lengths on both sides of every byte of a 32-bit length.
	for _, n := range []int{0, 1, 2, 7, 255, 256, 257, 4095, 65535, 65536, 65537, 1 << 20} {
		a := make([]byte, 1+rng.IntN(100))
		b := make([]byte, n)
		for i := range a {
			a[i] = byte(rng.Uint32())
		}
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		whole := checksum(append(bytes.Clone(a), b...))
		if got := shiftCRC(checksum(a), uint32(n)) ^ checksum(b); got != whole {
			t.Errorf("len %d: combined %08x, CRC of the whole %08x", n, got, whole)
		}
	}
	// A length whose every byte is set, without 4 GiB of data: shifting by
	// n then by m is shifting by n+m.
	for _, n := range []uint32{0xffffffff, 0x01010101, 0x80000000} {
		c := checksum([]byte("dranode"))
		if got, want := shiftCRC(shiftCRC(c, n-12345), 12345), shiftCRC(c, n); got != want {
			t.Errorf("shift by %#x in two steps %08x, in one %08x", n, got, want)
		}
	}
}

// naiveFrames is the definition: every offset at or after from where
// readFrame verifies.
func naiveFrames(data []byte, from int) []int {
	var offs []int
	for p := from; p < len(data); p++ {
		if _, _, f := readFrame(data, p); f == faultNone {
			offs = append(offs, p)
		}
	}
	return offs
}

func searchFrames(data []byte, from int) []int {
	var offs []int
	s := newFrameSearch(data, from)
	for at := from; ; {
		p, payload, end, ok := s.next(at)
		if !ok {
			return offs
		}
		if pl, e, f := readFrame(data, p); f != faultNone || !bytes.Equal(pl, payload) || e != end {
			panic("frameSearch returned a frame readFrame does not verify")
		}
		offs = append(offs, p)
		at = p + 1
	}
}

func TestFrameSearchFindsExactlyTheValidFrames(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		// Random bytes with frames planted in them, some nested in others'
		// payloads, and lengths that point inside the data.
		data := make([]byte, rng.IntN(600))
		for j := range data {
			data[j] = byte(rng.Uint32())
			if rng.IntN(3) == 0 {
				data[j] = byte(rng.IntN(4))
			}
		}
		for range rng.IntN(6) {
			if len(data) < frameHdrLen+1 {
				break
			}
			p := rng.IntN(len(data) - frameHdrLen)
			n := 1 + rng.IntN(len(data)-p-frameHdrLen)
			frame := appendFrame(nil, data[p+frameHdrLen:p+frameHdrLen+n])
			copy(data[p:], frame[:frameHdrLen])
		}
		from := 0
		if len(data) > 0 {
			from = rng.IntN(len(data))
		}
		want, got := naiveFrames(data, from), searchFrames(data, from)
		if !slices.Equal(got, want) {
			t.Fatalf("case %d (%d bytes from %d): found frames at %v, want %v", i, len(data), from, got, want)
		}
	}
}

// ones is the crafted tail: at every offset up to 16 MiB before its end it
// reads as a frame of 0x01010101 bytes (16 MiB) whose checksum is wrong.
// Checksumming each candidate would hash 4 million × 16 MiB: hours.
const onesLen = 20 << 20

func TestFrameSearchWorkIsLinear(t *testing.T) {
	data := bytes.Repeat([]byte{1}, onesLen)
	s := newFrameSearch(data, 0)
	if _, _, _, ok := s.next(0); ok {
		t.Fatal("found a frame in 0x01 bytes")
	}
	// The prefix pass hashes every byte once; each candidate recomputes at
	// most two partial strides.
	if limit := int64(len(data)) * (1 + 2*prefixStride); s.hashed > limit {
		t.Errorf("hashed %d bytes for %d bytes of data, want at most %d", s.hashed, len(data), limit)
	}
	if s.hashed < int64(len(data)) {
		t.Errorf("hashed %d bytes, fewer than the %d there are: the count is wrong", s.hashed, len(data))
	}
}

// beforeDeadline runs fn and fails the test if it is still running shortly
// before the test binary's -timeout would kill it, so that a return to a
// quadratic search fails with a message rather than a goroutine dump.
func beforeDeadline(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	var expire <-chan time.Time
	if d, ok := t.Deadline(); ok {
		expire = time.After(time.Until(d) * 9 / 10)
	}
	select {
	case <-done:
	case <-expire:
		t.Fatalf("%s still running near the test deadline: the search for valid frames is not linear", what)
	}
}

func TestJournalCraftedTailOpensPromptly(t *testing.T) {
	ones := bytes.Repeat([]byte{1}, onesLen)

	t.Run("torn tail of the last log", func(t *testing.T) {
		dir := t.TempDir()
		log := buildLog(1, -1, []change{{"a", "1"}})
		if err := os.WriteFile(filepath.Join(dir, "log.1"), append(bytes.Clone(log.data), ones...), 0o600); err != nil {
			t.Fatal(err)
		}
		beforeDeadline(t, "OpenJournal", func() {
			j, err := OpenJournal[string](dir, recoverSchema)
			if err != nil {
				t.Error(err)
				return
			}
			defer j.Close()
			if got := j.Snapshot(); len(got) != 1 || got["a"] != "1" {
				t.Errorf("state %v, want a=1", got)
			}
		})
		if st, err := os.Stat(filepath.Join(dir, "log.1")); err != nil || st.Size() != int64(len(log.data)) {
			t.Errorf("log.1 after open: %v, %v; want the tail cut at %d", st.Size(), err, len(log.data))
		}
	})

	t.Run("damage before the last log", func(t *testing.T) {
		dir := t.TempDir()
		first := buildLog(1, -1, []change{{"a", "1"}})
		damaged := append(bytes.Clone(first.data), ones...)
		second := buildLog(2, int64(len(damaged)), []change{{"b", "2"}})
		for name, data := range map[string][]byte{"log.1": damaged, "log.2": second.data} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		beforeDeadline(t, "OpenJournal", func() {
			_, err := OpenJournal[string](dir, recoverSchema)
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Offset != int64(len(first.data)) {
				t.Errorf("FailOnCorrupt: %v, want a *CorruptError at %d", err, len(first.data))
			}
		})
		beforeDeadline(t, "OpenJournal with MoveCorruptAside", func() {
			j, err := OpenJournal[string](dir, recoverSchema, WithCorruptPolicy(MoveCorruptAside))
			if err != nil {
				t.Error(err)
				return
			}
			defer j.Close()
			rec := j.Recovery()
			if rec == nil || rec.Kept != 1 || rec.Unreadable != onesLen || len(rec.Unsure) != 1 || rec.Unsure[0].Key != "b" {
				t.Errorf("recovery %+v, want 1 kept, %d unreadable, b unsure", rec, onesLen)
			}
			if got := j.Snapshot(); len(got) != 1 || got["a"] != "1" {
				t.Errorf("state %v, want a=1", got)
			}
		})
	})
}

func TestFrameSearchFromEnd(t *testing.T) {
	data := appendFrame(nil, []byte("x"))
	for from := 0; from <= len(data)+1; from++ {
		want := naiveFrames(data, min(from, len(data)))
		if got := searchFrames(data, from); !slices.Equal(got, want) {
			t.Errorf("from %d: %v, want %v", from, got, want)
		}
	}
}
