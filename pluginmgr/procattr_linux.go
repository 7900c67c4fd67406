//go:build linux

package pluginmgr

import (
	"os/exec"
	"syscall"
)

// killWithHost makes the kernel kill the plugin when the host process dies
// without closing it (SIGKILL, OOM kill, a crash). Otherwise a restarted
// agent would find the previous run's plugins still running, holding devices
// and sockets, next to the ones it starts.
func killWithHost(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
