// Command pause is the program of the pause image, the process that holds a
// pod sandbox's namespaces: it sleeps until SIGTERM or SIGINT and exits 0.
// As PID 1 of a PID namespace it also reaps the zombies that are reparented
// to it, as the kubelet's own pause image does.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	pid1 := os.Getpid() == 1
	// A PID 1 ignores SIGTERM until it has a handler: this line says it
	// has one now.
	fmt.Fprintln(os.Stderr, "pause: waiting for SIGTERM or SIGINT")
	for s := range sig {
		if s == syscall.SIGCHLD {
			if pid1 {
				reap()
			}
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: %v, exiting\n", s)
		os.Exit(0)
	}
}

// reap waits for every child that has exited, without blocking: one SIGCHLD
// may stand for several children.
func reap() (reaped []int) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return reaped
		}
		reaped = append(reaped, pid)
	}
}
