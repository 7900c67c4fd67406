package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// StopGrace is how long dranodectl waits, after SIGINT or SIGTERM, for the
// command to return before it exits anyway. Every long operation watches
// its context and stops well within it; the bound is for a call that
// cannot be interrupted (a blocked system call, say).
const StopGrace = 5 * time.Second

// NotifyContext returns a context that SIGINT or SIGTERM cancels with an
// *Interrupted cause, so that Run stops the command and exits with 130 or
// 143. A second signal, or StopGrace passing after the first, calls exit
// with the same status at once, after a line on stderr. stop releases the
// signals.
func NotifyContext(parent context.Context, stderr io.Writer, exit func(int)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		var first *Interrupted
		select {
		case s := <-sigs:
			first = &Interrupted{Signal: s.(syscall.Signal)}
			cancel(first)
		case <-done:
			return
		}
		timer := time.NewTimer(StopGrace)
		defer timer.Stop()
		select {
		case s := <-sigs:
			second := &Interrupted{Signal: s.(syscall.Signal)}
			fmt.Fprintf(stderr, "dranodectl: %v again: exiting now\n", second)
			exit(second.ExitStatus())
		case <-timer.C:
			fmt.Fprintf(stderr, "dranodectl: %v: the command did not stop within %v; exiting\n", first, StopGrace)
			exit(first.ExitStatus())
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}
