package loop

import (
	"path/filepath"
	"testing"
)

// ParseConfig reads whatever the agent's configuration holds: it must
// never panic, and what it accepts must keep its own bounds.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `{"numDevices": 4, "size": "1Mi"}`, `{"size": "1000"}`, `{"numDevices": -1}`,
		`{"loopDevices": [6, 7], "stateDir": "/var/lib/x"}`, `{"stateDir": "relative"}`,
		`{"healthPollInterval": "10ms", "driverName": "loop.example.org"}`, `{"unknown": 1}`, `[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := ParseConfig(raw)
		if err != nil {
			return
		}
		if n := *c.NumDevices; n < 0 || n > maxDevices {
			t.Fatalf("accepted numDevices %d", n)
		}
		if v := c.size.Value(); v <= 0 || v%512 != 0 {
			t.Fatalf("accepted size %d", v)
		}
		if !filepath.IsAbs(c.StateDir) || c.HealthPollInterval <= 0 {
			t.Fatalf("accepted %+v", c)
		}
	})
}
