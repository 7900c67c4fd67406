package pluginmgr

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// socketDirPrefix names the directory, under os.TempDir, in which each
// plugin creates its go-plugin socket.
const socketDirPrefix = "dranode-plugin-"

// staleSocketDirAge is how old a socket directory must be before
// removeStaleSocketDirs looks at it: longer than any start (StartTimeout
// is seconds), so that a plugin still starting, which has no socket yet,
// never loses its directory.
const staleSocketDirAge = 10 * time.Minute

// makeSocketDir makes a plugin's socket directory, first removing those
// that hosts killed without Close left behind (a SIGKILLed agent's
// plugins die with it, Pdeathsig, but nothing removes their directories:
// every crash left one in /tmp).
func makeSocketDir(log hclog.Logger) (string, error) {
	removeStaleSocketDirs(os.TempDir(), time.Now(), log)
	return os.MkdirTemp("", socketDirPrefix)
}

// removeStaleSocketDirs removes the socket directories under tmp that no
// live plugin uses: older than staleSocketDirAge, owned by this user, and
// holding no socket that accepts a connection (a dead plugin's socket
// refuses one). A directory it cannot judge is kept.
func removeStaleSocketDirs(tmp string, now time.Time, log hclog.Logger) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), socketDirPrefix) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < staleSocketDirAge || !ownedByMe(info) || !unusedSocketDir(dir) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("cannot remove a dead plugin's socket directory", "dir", dir, "error", err)
			continue
		}
		log.Info("removed a dead plugin's socket directory", "dir", dir, "modified", info.ModTime())
	}
}

// unusedSocketDir reports whether every entry of dir is a socket that
// refuses a connection (no process listens on it any more).
func unusedSocketDir(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 {
			return false
		}
		c, err := net.DialTimeout("unix", filepath.Join(dir, e.Name()), time.Second)
		if err == nil {
			c.Close()
			return false
		}
		if !refused(err) {
			return false
		}
	}
	return true
}
