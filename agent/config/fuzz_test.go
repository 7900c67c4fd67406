package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad: any file content either loads into a configuration that
// validates, or fails with a *Error naming a key; never a panic.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		validFile,
		"nodeName: a\n",
		"slices:\n  syncDelay: 1s\n",
		"plugins:\n  drivers:\n    - path: /p\n      sha256: \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"\n      config: [1, 2]\n",
		"plugins: {drivers: {}}\n",
		"http: {address: \"[::1]:0\"}\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "agent.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(flags(t, "--config", path), nil)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is a %T, not a *Error", err, err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("config.Load returned a configuration that does not validate: %v", err)
		}
	})
}
