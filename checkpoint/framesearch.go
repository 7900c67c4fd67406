package checkpoint

import (
	"encoding/binary"
	"hash/crc32"
	"sync"
)

// Telling a torn tail from damage, and recovering the readable records after
// damage, means looking for a frame that verifies at every offset of what
// follows. Checksumming each candidate's payload would cost up to the rest
// of the file per offset: hours on a crafted file of a few MiB whose bytes
// read as plausible lengths (20 MiB of 0x01 claims 16 MiB at every offset).
// frameSearch instead keeps the CRC-32C of every prefix of the data (one
// every prefixStride bytes, the rest recomputed on demand) and derives the
// CRC of any range from the CRCs of two prefixes, so each offset costs a
// bounded amount of work, whatever length it claims.
//
// For A a prefix and B what follows it, CRC(A‖B) = CRC(A)·x^(8|B|) ⊕ CRC(B)
// in GF(2)[x] modulo the CRC polynomial (zlib's crc32_combine), so
// CRC(B) = CRC(A‖B) ⊕ CRC(A)·x^(8|B|).

// prefixStride trades memory (4 bytes per stride) for the bytes recomputed
// per prefix lookup (fewer than a stride).
const prefixStride = 16

// castagnoliReflected is the CRC-32C polynomial in the reflected bit order
// hash/crc32 uses, where bit 31 is the coefficient of x^0.
const castagnoliReflected = 0x82f63b78

// mulModP multiplies two polynomials modulo the CRC-32C polynomial, both in
// reflected bit order.
func mulModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReflected
		} else {
			b >>= 1
		}
	}
	return p
}

// shiftTables[j][k] is x^(8·k·256^j) modulo the polynomial: the factor that
// appending k·256^j zero bytes applies to a CRC. A 32-bit length is four
// lookups and at most four multiplications.
var shiftTables = sync.OnceValue(func() *[4][256]uint32 {
	var t [4][256]uint32
	x8 := uint32(1) << 23 // x^8
	for j := range t {
		t[j][0] = 1 << 31 // x^0
		t[j][1] = x8
		for k := 2; k < 256; k++ {
			t[j][k] = mulModP(t[j][k-1], x8)
		}
		x8 = mulModP(t[j][255], x8) // x^(8·256^(j+1))
	}
	return &t
})

// shiftCRC returns what crc becomes when n more bytes follow the data it
// covers, without the contribution of those bytes: crc·x^(8n).
func shiftCRC(crc uint32, n uint32) uint32 {
	t := shiftTables()
	for j := 0; n != 0; j, n = j+1, n>>8 {
		if b := n & 0xff; b != 0 {
			crc = mulModP(crc, t[j][b])
		}
	}
	return crc
}

// frameSearch finds the frames that verify at any offset of data from an
// offset on.
type frameSearch struct {
	data   []byte
	from   int
	prefix []uint32 // prefix[k] is the CRC-32C of data[from : from+k*prefixStride]
	// hashed counts the bytes fed to the CRC, the search's work, so that
	// tests can hold it to linear without timing it.
	hashed int64
}

func newFrameSearch(data []byte, from int) *frameSearch {
	s := &frameSearch{data: data, from: from}
	if from >= len(data) {
		return s
	}
	s.prefix = make([]uint32, 0, (len(data)-from)/prefixStride+1)
	var crc uint32
	s.prefix = append(s.prefix, crc)
	for p := from; p+prefixStride <= len(data); p += prefixStride {
		crc = crc32.Update(crc, castagnoli, data[p:p+prefixStride])
		s.prefix = append(s.prefix, crc)
	}
	s.hashed += int64(len(data) - from)
	return s
}

// crcTo returns the CRC-32C of data[from:i].
func (s *frameSearch) crcTo(i int) uint32 {
	k := (i - s.from) / prefixStride
	start := s.from + k*prefixStride
	s.hashed += int64(i - start)
	return crc32.Update(s.prefix[k], castagnoli, s.data[start:i])
}

// next returns the first offset at or after at (and at or after the
// search's start) where a frame verifies, its payload and the offset after
// it; ok is false when there is none.
func (s *frameSearch) next(at int) (off int, payload []byte, end int, ok bool) {
	data := s.data
	for p := max(at, s.from); len(data)-p > frameHdrLen; p++ {
		n := binary.LittleEndian.Uint32(data[p:])
		if n == 0 || uint64(n) > uint64(len(data)-p-frameHdrLen) {
			continue
		}
		start, stop := p+frameHdrLen, p+frameHdrLen+int(n)
		sum := s.crcTo(stop) ^ shiftCRC(s.crcTo(start), n)
		if sum == binary.LittleEndian.Uint32(data[p+4:]) {
			return p, data[start:stop], stop, true
		}
	}
	return 0, nil, 0, false
}
