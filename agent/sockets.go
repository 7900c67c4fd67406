package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dranode/dranode/agent/config"
)

// RegistrationSocket is where the kubelet's plugin watcher finds the driver.
func RegistrationSocket(registryDir, driverName string) string {
	return filepath.Join(registryDir, driverName+"-reg.sock")
}

// DRASocket is the driver's DRA service endpoint.
func DRASocket(pluginsDir, driverName string) string {
	return filepath.Join(pluginsDir, driverName, "dra.sock")
}

// RegistrationSocketFor is the registration socket of one instance of the
// driver: RegistrationSocket without an instance ID,
// "<driver>-<instanceID>-reg.sock" with one (the upstream kubeletplugin
// helper's RollingUpdate name).
func RegistrationSocketFor(registryDir, driverName, instanceID string) string {
	if instanceID == "" {
		return RegistrationSocket(registryDir, driverName)
	}
	return filepath.Join(registryDir, driverName+"-"+instanceID+"-reg.sock")
}

// DRASocketFor is the DRA socket of one instance of the driver: DRASocket
// without an instance ID, "<driver>/dra-<instanceID>.sock" with one.
func DRASocketFor(pluginsDir, driverName, instanceID string) string {
	if instanceID == "" {
		return DRASocket(pluginsDir, driverName)
	}
	return filepath.Join(pluginsDir, driverName, "dra-"+instanceID+".sock")
}

// MaxSocketPath is the longest path a unix socket can be dialed at on Linux
// (sun_path is 108 bytes with the terminating NUL).
const MaxSocketPath = 107

// ErrSocketPathTooLong is wrapped by the error of a driver whose kubelet
// socket path would be longer than MaxSocketPath.
var ErrSocketPathTooLong = errors.New("unix socket path too long")

// listenUnix listens on path with SocketMode and no window in which the
// socket exists with other permissions: it binds in a private (0700)
// directory next to path, sets the mode, and renames the socket into place,
// replacing a stale socket. Something at path that is not a socket is an
// error, never removed.
func listenUnix(path string) (net.Listener, error) {
	// Binding elsewhere and renaming would succeed with any length, and
	// leave a socket no client can dial ("connect: invalid argument").
	if len(path) > MaxSocketPath {
		return nil, fmt.Errorf("%w: %s is %d bytes, at most %d: shorten the kubelet's directories, the driver name or kubelet.instanceID", ErrSocketPathTooLong, path, len(path), MaxSocketPath)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("%s exists and is not a socket (%s); not replacing it", path, fi.Mode().Type())
	}
	tmpDir, err := mkdirShortTemp(dir, len(filepath.Base(path))-3)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	if len(tmp) > MaxSocketPath {
		return nil, fmt.Errorf("%w: binding %s first needs %s, %d bytes, at most %d: shorten the kubelet's directories, the driver name or kubelet.instanceID", ErrSocketPathTooLong, path, tmp, len(tmp), MaxSocketPath)
	}
	lis, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, err
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, SocketMode); err != nil {
		lis.Close()
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		lis.Close()
		return nil, err
	}
	return lis, nil
}

// mkdirShortTemp makes a new private (0700) directory in dir named "." and
// n random letters (1 to 8). listenUnix binds in it at "<name>/s", n+4
// bytes after dir's slash: with n three less than the final name's length
// the bind path is no longer than the final one, so every path that fits
// in sun_path can be bound. os.MkdirTemp's names (a 10-digit suffix) made
// a 98-byte socket path bind at 108 bytes and fail with "invalid
// argument".
func mkdirShortTemp(dir string, n int) (string, error) {
	n = min(max(n, 1), 8)
	const letters = "abcdefghijklmnopqrstuvwxyz234567"
	name := make([]byte, 1+n)
	name[0] = '.'
	for {
		for i := 1; i < len(name); i++ {
			name[i] = letters[rand.IntN(len(letters))]
		}
		p := filepath.Join(dir, string(name))
		err := os.Mkdir(p, 0o700)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
}

// removeStaleSockets removes the sockets of other instances of the driver
// that nothing listens on any more (an instance killed before it could
// clean up): the kubelet then forgets them. A socket that accepts, or that
// cannot be probed, stays.
func (a *Agent) removeStaleSockets(d *driver) {
	for _, path := range a.otherInstanceSockets(d, true) {
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			conn.Close()
			continue
		}
		if refused(err) {
			if err := os.Remove(path); err == nil {
				a.log.Info("Removed the socket of an instance that is gone", "driver", d.name, "socket", path)
			}
		}
	}
}

// otherInstanceSockets are the socket files of the driver's other
// instances: registration sockets, and DRA sockets too when withDRA.
func (a *Agent) otherInstanceSockets(d *driver, withDRA bool) []string {
	patterns := []string{filepath.Join(a.cfg.Kubelet.RegistryDir, d.name+"-*reg.sock")}
	if withDRA {
		patterns = append(patterns, filepath.Join(a.cfg.Kubelet.PluginsDir, d.name, "dra*.sock"))
	}
	var out []string
	for _, pattern := range patterns {
		m, _ := filepath.Glob(pattern)
		for _, path := range m {
			if path != d.regPath && path != d.draPath && ownedName(filepath.Base(path), d.name) {
				out = append(out, path)
			}
		}
	}
	return out
}

// otherInstanceRegistered reports whether another instance of one of the
// drivers serves its registration socket: one the kubelet can move on to.
func (a *Agent) otherInstanceRegistered(drivers []*driver) bool {
	for _, d := range drivers {
		for _, path := range a.otherInstanceSockets(d, false) {
			if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
				conn.Close()
				return true
			}
		}
	}
	return false
}

// ownedName reports whether a socket file name is one of the names this
// driver's instances use, and not another driver's whose name starts with
// this one's.
func ownedName(base, driver string) bool {
	switch {
	case base == driver+"-reg.sock", base == "dra.sock":
		return true
	case strings.HasPrefix(base, "dra-") && strings.HasSuffix(base, ".sock"):
		return config.ValidInstanceID(strings.TrimSuffix(strings.TrimPrefix(base, "dra-"), ".sock"))
	case strings.HasPrefix(base, driver+"-") && strings.HasSuffix(base, "-reg.sock"):
		// "<driver>-<id>-reg.sock": a pod UID is 36 characters with 4
		// dashes; any other ID with dashes might be another driver's name.
		id := strings.TrimSuffix(strings.TrimPrefix(base, driver+"-"), "-reg.sock")
		return config.ValidInstanceID(id) && (!strings.Contains(id, "-") || isUID(id))
	}
	return false
}

// isUID reports whether s has the form of a Kubernetes UID (a UUID).
func isUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if r != '-' {
				return false
			}
			continue
		}
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}
