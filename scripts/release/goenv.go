package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// goEnv runs the go command as a user outside the repository would: no
// go.work, no replace, modules only from the release proxy (then the real
// module cache and proxy for third-party modules), in a module cache of its
// own so that a changed release of an already-seen version is not hidden.
type goEnv struct {
	modCache string
	env      []string
}

// newGoEnv prepares an environment with the module cache modCache whose
// GOPROXY serves proxyURL first. The checksum database is consulted for
// everything but this repository's modules, whose releases it has never
// seen.
func newGoEnv(modCache, proxyURL string) (*goEnv, error) {
	realCache, err := goEnvValue("GOMODCACHE")
	if err != nil {
		return nil, err
	}
	realProxy, err := goEnvValue("GOPROXY")
	if err != nil {
		return nil, err
	}
	chain := []string{proxyURL, "file://" + filepath.ToSlash(filepath.Join(realCache, "cache", "download"))}
	for _, p := range strings.FieldsFunc(realProxy, func(r rune) bool { return r == ',' || r == '|' }) {
		// "direct" would fetch our unreleased versions from the repository's
		// home over git, which is neither what a user gets nor reachable.
		if p != "direct" && p != "off" {
			chain = append(chain, p)
		}
	}
	g := &goEnv{modCache: modCache}
	// The checksum database's tiles and lookups are content-addressed and
	// verified against its signed tree head whatever cache they come from;
	// seeding them saves fetching hundreds again on every run.
	sumdb := filepath.Join("cache", "download", "sumdb")
	_, seeded := os.Stat(filepath.Join(g.modCache, sumdb))
	if _, err := os.Stat(filepath.Join(realCache, sumdb)); err == nil && seeded != nil {
		if err := os.CopyFS(filepath.Join(g.modCache, sumdb), os.DirFS(filepath.Join(realCache, sumdb))); err != nil {
			return nil, fmt.Errorf("seeding the scratch module cache: %w", err)
		}
	}
	set := map[string]string{
		"GOMODCACHE": g.modCache,
		"GOPROXY":    strings.Join(chain, ","),
		// -trimpath: the build cache is shared whatever GOMODCACHE is;
		// -modcacherw: a shared cache's own modules can be evicted.
		"GOFLAGS":     "-mod=mod -trimpath -modcacherw",
		"GONOSUMDB":   strings.TrimSuffix(pathPrefix, "/"),
		"GOPRIVATE":   "",
		"GONOPROXY":   "",
		"GOWORK":      "off",
		"GOTOOLCHAIN": "local",
		// As the images and every other build outside the race tests
		// (DESIGN.md, "One build variant"): the released modules have no
		// cgo code, and with cgo the consumers' builds would compile net
		// and everything above it, client-go and gRPC included, once more.
		"CGO_ENABLED": "0",
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			g.env = append(g.env, kv)
		}
	}
	for k, v := range set {
		g.env = append(g.env, k+"="+v)
	}
	return g, nil
}

func goEnvValue(key string) (string, error) {
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", key, describeExit(err))
	}
	return strings.TrimSpace(string(out)), nil
}

// run runs name (a go command unless told otherwise) in dir and returns its
// standard output; a failure's error carries both outputs.
func (g *goEnv) run(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = g.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s (in %s): %w\n%s", name, strings.Join(args, " "), dir, err,
			strings.TrimSpace(stdout.String()+"\n"+stderr.String()))
	}
	return stdout.String(), nil
}

// close removes the scratch module cache (read-only files: go clean knows
// how).
func (g *goEnv) close() {
	_, _ = g.run(os.TempDir(), "go", "clean", "-modcache")
}

func describeExit(err error) error {
	var exit *exec.ExitError
	if errors.As(err, &exit) && len(exit.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(exit.Stderr)))
	}
	return err
}
