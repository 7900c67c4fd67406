package agent

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadConfig: any file content either loads into a configuration that
// validates, or fails with a *ConfigError naming a key; never a panic.
func FuzzLoadConfig(f *testing.F) {
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
		cfg, err := LoadConfig(flags(t, "--config", path), nil)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is a %T, not a *ConfigError", err, err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("LoadConfig returned a configuration that does not validate: %v", err)
		}
	})
}

// FuzzReadClaimFile: decoding never panics, and a claim it accepts has a
// namespace.
func FuzzReadClaimFile(f *testing.F) {
	if data, err := os.ReadFile("../examples/config/claims/gpu-claim.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("kind: ResourceClaim\nmetadata: {name: x}\n"))
	f.Add([]byte("kind: Pod\n"))
	f.Add([]byte("{\"metadata\": {\"name\": \"x\", \"uid\": 3}}"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "claim.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := ReadClaimFile(path)
		if err == nil && c.Namespace == "" {
			t.Fatal("accepted claim without a namespace")
		}
	})
}
