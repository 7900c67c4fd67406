package driver

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const dranodePrefix = "github.com/dranode/dranode/"

// goJSON runs the go command in the module's root with the workspace off
// (as a vendor building the module alone would) and decodes its stream of
// JSON objects.
func goJSON[T any](t *testing.T, args ...string) []T {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var values []T
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var v T
		if err := dec.Decode(&v); errors.Is(err, io.EOF) {
			return values
		} else if err != nil {
			t.Fatalf("go %s: decode: %v", strings.Join(args, " "), err)
		}
		values = append(values, v)
	}
}

type modulePath struct {
	Path    string
	Version string
}

// libraryModules are the dranode modules released for vendors to import
// that the piecemeal driver may use; the agent and the plugin protocol are
// the other way to use dranode, not parts of this one.
var libraryModules = []string{"cdi", "checkpoint", "claimcache", "inventory", "sliceclient"}

// The module requires exactly the dranode modules whose packages its
// build (tests included) uses, each resolved from its own directory, and
// all of them released libraries: a vendor adopting one module does not
// inherit the rest, and a copy of this directory builds against released
// modules alone, with no test-only module (tools/envtest, integration)
// to resolve.
func TestRequiresOnlyTheDranodeModulesItImports(t *testing.T) {
	type pkg struct {
		ImportPath string
		Module     *modulePath
	}
	self := dranodePrefix + "examples/piecemeal-driver"
	imported := map[string][]string{} // module → an importing package's import path, for messages
	for _, p := range goJSON[pkg](t, "list", "-deps", "-test", "-json=ImportPath,Module", "./...") {
		if p.Module != nil && strings.HasPrefix(p.Module.Path, dranodePrefix) && p.Module.Path != self {
			imported[p.Module.Path] = append(imported[p.Module.Path], p.ImportPath)
		}
	}

	type goMod struct {
		Module  modulePath
		Require []modulePath
		Replace []struct{ Old, New modulePath }
	}
	mods := goJSON[goMod](t, "mod", "edit", "-json")
	if len(mods) != 1 || mods[0].Module.Path != self {
		t.Fatalf("go mod edit -json: %+v, want the module %s", mods, self)
	}
	required := map[string]bool{}
	for _, r := range mods[0].Require {
		if strings.HasPrefix(r.Path, dranodePrefix) {
			required[r.Path] = true
		}
	}
	replaced := map[string]string{}
	for _, r := range mods[0].Replace {
		replaced[r.Old.Path] = r.New.Path
	}

	if len(imported) == 0 {
		t.Fatal("go list found no dranode packages at all; the check would prove nothing")
	}
	for _, m := range sortedKeys(imported) {
		if !required[m] {
			t.Errorf("%s is imported (by %s) but not required in go.mod", m, imported[m][0])
		}
	}
	for _, m := range sortedKeys(required) {
		if !slices.Contains(libraryModules, strings.TrimPrefix(m, dranodePrefix)) {
			t.Errorf("%s is required, but the driver may use only the library modules %v", m, libraryModules)
		}
		if _, ok := imported[m]; !ok {
			t.Errorf("%s is required in go.mod but no package of it is imported", m)
		}
		// Resolvable on its own: a replace to the module's own directory,
		// which holds that module.
		want := "../../" + strings.TrimPrefix(m, dranodePrefix)
		if replaced[m] != want {
			t.Errorf("%s is replaced by %q, want %q", m, replaced[m], want)
			continue
		}
		data, err := os.ReadFile(filepath.Join("..", want, "go.mod"))
		if err != nil || !strings.HasPrefix(string(data), "module "+m+"\n") {
			t.Errorf("%s: %s/go.mod does not declare it (%v)", m, want, err)
		}
	}
	for _, m := range sortedKeys(replaced) {
		if strings.HasPrefix(m, dranodePrefix) && !required[m] {
			t.Errorf("%s is replaced but not required; drop the replace", m)
		}
	}
	for _, forbidden := range []string{"agent", "pluginmgr", "tools/envtest"} {
		m := dranodePrefix + forbidden
		if _, ok := imported[m]; ok || required[m] {
			t.Errorf("%s is used (imported by %v, required %v); the piecemeal driver must not need it", m, imported[m], required[m])
		}
	}
	for _, want := range []string{"cdi", "claimcache", "sliceclient"} {
		if !required[dranodePrefix+want] {
			t.Errorf("%s%s is not required: the driver no longer shows that module", dranodePrefix, want)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return slices.Clip(keys)
}
