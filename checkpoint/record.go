package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A journal record (the payload of one frame after the header) is one or
// more changes, applied all or nothing:
//
//	'P' uvarint(len(key)) key uvarint(len(value)) value   put; value is JSON
//	'D' uvarint(len(key)) key                            delete
const (
	opPut    = 'P'
	opDelete = 'D'
)

func appendPut(dst []byte, key string, value []byte) []byte {
	dst = append(dst, opPut)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	return append(dst, value...)
}

func appendDelete(dst []byte, key string) []byte {
	dst = append(dst, opDelete)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	return append(dst, key...)
}

var errRecord = errors.New("malformed record")

// parseRecord calls fn for each change in a record payload, in order. value
// is nil for a delete. Slices passed to fn alias payload.
func parseRecord(payload []byte, fn func(key, value []byte, del bool)) error {
	if len(payload) == 0 {
		return fmt.Errorf("%w: empty", errRecord)
	}
	for p := 0; p < len(payload); {
		op := payload[p]
		p++
		if op != opPut && op != opDelete {
			return fmt.Errorf("%w: unknown operation 0x%02x at byte %d", errRecord, op, p-1)
		}
		key, n, err := readBytes(payload, p)
		if err != nil {
			return fmt.Errorf("%w: key at byte %d: %v", errRecord, p, err)
		}
		if len(key) == 0 {
			return fmt.Errorf("%w: empty key at byte %d", errRecord, p)
		}
		p = n
		if op == opDelete {
			fn(key, nil, true)
			continue
		}
		value, n, err := readBytes(payload, p)
		if err != nil {
			return fmt.Errorf("%w: value at byte %d: %v", errRecord, p, err)
		}
		if len(value) == 0 {
			return fmt.Errorf("%w: empty value at byte %d", errRecord, p)
		}
		p = n
		fn(key, value, false)
	}
	return nil
}

func readBytes(b []byte, p int) ([]byte, int, error) {
	n, w := binary.Uvarint(b[p:])
	if w <= 0 {
		return nil, p, errors.New("bad length")
	}
	p += w
	if n > uint64(len(b)-p) {
		return nil, p, fmt.Errorf("length %d exceeds the %d bytes left", n, len(b)-p)
	}
	return b[p : p+int(n)], p + int(n), nil
}
