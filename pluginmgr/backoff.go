package pluginmgr

import (
	"time"
)

// Backoff is the delay between restart attempts: Initial after the first
// failure, doubling up to Max. A plugin that ran for ResetAfter before it
// failed starts again from Initial.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	ResetAfter time.Duration
}

func (b Backoff) delay(consecutive int) time.Duration {
	d := b.Initial
	for i := 1; i < consecutive && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// CrashLoopPolicy stops restarting a plugin that failed MaxFailures times
// within Window.
type CrashLoopPolicy struct {
	MaxFailures int
	Window      time.Duration
}

// failureWindow counts the failures of the last window, for CrashLoopPolicy.
type failureWindow struct {
	window time.Duration
	times  []time.Time
}

// add records a failure at now and returns how many failures, this one
// included, happened within the window before now.
func (w *failureWindow) add(now time.Time) int {
	kept := w.times[:0]
	for _, t := range w.times {
		if now.Sub(t) < w.window {
			kept = append(kept, t)
		}
	}
	w.times = append(kept, now)
	return len(w.times)
}
