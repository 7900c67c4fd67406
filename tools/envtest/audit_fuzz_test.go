package envtest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The audit log reader takes whatever the file holds: it must return events
// or an error, never panic, and never more events than complete lines.
func FuzzReadAuditLog(f *testing.F) {
	f.Add([]byte(`{"stage":"ResponseComplete","verb":"create","user":{"username":"admin"},"objectRef":{"resource":"resourceslices"},"responseStatus":{"code":201}}` + "\n"))
	f.Add([]byte("{}\n{\"verb\":\"patch\"}\n{\"ve"))
	f.Add([]byte("\n\n"))
	f.Add([]byte(`{"objectRef":null,"responseStatus":{"code":"x"}}` + "\n"))
	f.Fuzz(func(t *testing.T, content []byte) {
		path := filepath.Join(t.TempDir(), "audit.log")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		events, err := readAuditLog(path)
		if err != nil {
			if events != nil {
				t.Errorf("events %v returned with error %v", events, err)
			}
			return
		}
		if complete := bytes.Count(content, []byte("\n")); len(events) > complete {
			t.Errorf("%d events from %d complete lines", len(events), complete)
		}
	})
}
