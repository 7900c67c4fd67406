package sliceclient

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// maxNameLength is the limit on a ResourceSlice name (a DNS subdomain).
const maxNameLength = 253

// SliceName is the name of slice number index of a pool. It depends only on
// its arguments, so a restarted publisher finds its own slices without
// listing, and it is a valid DNS subdomain for valid inputs. The readable
// part (node, driver, pool) is shortened when the name would be too long; a
// hash of all three keeps names of different pools apart even then, and even
// when joining with "-" would make two triples read the same.
func SliceName(nodeName, driverName, poolName string, index int) string {
	sum := sha256.Sum256([]byte(nodeName + "\x00" + driverName + "\x00" + poolName))
	suffix := "-" + hex.EncodeToString(sum[:4]) + "-" + strconv.Itoa(index)
	readable := nodeName + "-" + driverName + "-" + strings.ReplaceAll(poolName, "/", ".")
	if room := maxNameLength - len(suffix); len(readable) > room {
		readable = strings.TrimRight(readable[:room], "-.")
	}
	return readable + suffix
}

// sliceIndex returns the index that name has as a slice of the pool, or
// false when name is not a name SliceName gives to that pool.
func sliceIndex(nodeName, driverName, poolName, name string) (int, bool) {
	dash := strings.LastIndexByte(name, '-')
	if dash < 0 {
		return 0, false
	}
	index, err := strconv.Atoi(name[dash+1:])
	if err != nil || index < 0 || strconv.Itoa(index) != name[dash+1:] {
		return 0, false
	}
	if SliceName(nodeName, driverName, poolName, index) != name {
		return 0, false
	}
	return index, true
}
