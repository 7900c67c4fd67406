package powerloss

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/dranode/dranode/checkpoint"
)

// The file workload: each goroutine g owns the document doc-<g> (a
// checkpoint.File in the store directory, which must exist: Precreate) and
// saves version n+1 over version n, Steps times per run. The documents'
// sizes vary, so the temporary files and renames differ in size too.
func init() {
	workloads["file"] = workload{write: writeDocuments, newChecker: func() checker {
		return &documentChecker{newSequences("version")}
	}}
}

var documentSchema = checkpoint.Schema{Kind: "powerloss.dranode.io/document", Version: 1}

type document struct {
	G   int    `json:"g"`
	N   int    `json:"n"`
	Pad string `json:"pad"`
}

func documentFor(g, n int) document {
	return document{G: g, N: n, Pad: strings.Repeat(string(rune('a'+(g+n)%26)), 32+(n*131+g*17)%3000)}
}

func documentPath(dir string, g int) string { return filepath.Join(dir, "doc-"+strconv.Itoa(g)) }

// loadDocument returns the version stored at path (0: none).
func loadDocument(path string) (int, document, error) {
	f, err := checkpoint.OpenFile[document](path, documentSchema)
	if err != nil {
		return 0, document{}, err
	}
	defer f.Close()
	d, err := f.Load()
	if errors.Is(err, fs.ErrNotExist) {
		return 0, document{}, nil
	}
	return d.N, d, err
}

func writeDocuments(dir string, env WriterEnv, out *Acker) error {
	var wg sync.WaitGroup
	errs := make([]error, env.Goroutines)
	for g := range env.Goroutines {
		wg.Go(func() {
			errs[g] = func() error {
				f, err := checkpoint.OpenFile[document](documentPath(dir, g), documentSchema)
				if err != nil {
					return err
				}
				defer f.Close()
				d, err := f.Load()
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("load doc-%d: %w", g, err)
				}
				for n := d.N + 1; n <= d.N+env.Steps; n++ {
					out.Try(strconv.Itoa(g), "Save", strconv.Itoa(n))
					if err := f.Save(documentFor(g, n)); err != nil {
						return fmt.Errorf("save doc-%d version %d: %w", g, n, err)
					}
					out.Ack(strconv.Itoa(g), "Save", strconv.Itoa(n))
				}
				return nil
			}()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// documentChecker follows each goroutine's document versions.
type documentChecker struct {
	sequences
}

func (c *documentChecker) setup(dir string) error { return os.Mkdir(dir, 0o755) }

// load opens every document the writers may have saved with the product's
// own code.
func (c *documentChecker) load(dir string) (map[int]int, []Violation) {
	versions := map[int]int{}
	var vs []Violation
	for _, g := range c.goroutines(nil) {
		path := documentPath(dir, g)
		var n int
		var d document
		if v := reopen("checkpoint.File.Load", func() (err error) {
			n, d, err = loadDocument(path)
			return err
		}); v != nil {
			v.Key = filepath.Base(path)
			vs = append(vs, *v)
			continue
		}
		if n > 0 && d != documentFor(g, n) {
			vs = append(vs, Violation{Kind: Corrupt, Key: filepath.Base(path), Detail: fmt.Sprintf("version %d does not hold what was saved as version %d", n, n)})
		}
		versions[g] = n
	}
	return versions, vs
}

func (c *documentChecker) reset(dir string) error {
	versions, vs := c.load(dir)
	if len(vs) > 0 {
		return vs[0]
	}
	c.adopt(versions)
	return nil
}

// check: every document is the last acknowledged version, or the one
// attempted after it.
func (c *documentChecker) check(dir string) ([]Violation, int, int) {
	acks := c.acks()
	versions, vs := c.load(dir)
	for _, g := range sortedKeysInt(versions) {
		if v := c.judge(g, versions[g], filepath.Base(documentPath(dir, g))); v != nil {
			vs = append(vs, *v)
		}
	}
	c.adopt(versions)
	return vs, acks, 0
}

func sortedKeysInt(m map[int]int) []int {
	gs := map[int]bool{}
	for g := range m {
		gs[g] = true
	}
	return sortedInts(gs)
}
