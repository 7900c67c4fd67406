package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Code is what the repository's Go code declares, as the documentation
// names it.
type Code struct {
	// Packages by directory relative to the root, slash-separated.
	Packages map[string]*Package
	// ByName lists the directories of the packages with each name.
	ByName map[string][]string
	// Types maps a type name to the names of its methods and fields, over
	// every package that declares a type of that name.
	Types map[string]map[string]bool
	// Tests holds every Test, Benchmark, Example and Fuzz function.
	Tests map[string]bool
}

// Package is one directory's declarations (its test files included).
type Package struct {
	Dir   string
	Name  string
	Names map[string]bool            // top-level functions, types, variables, constants
	Types map[string]map[string]bool // type name -> method and field names
}

// Modules returns the directory of every go.mod under root, relative and
// slash-separated, sorted, leaving out hidden directories, vendor and
// testdata (a go.mod there is a fixture, not a module of the repository).
func Modules(root string) ([]string, error) {
	var dirs []string
	err := walk(root, func(rel string, d fs.DirEntry) {
		if d.Name() == "go.mod" {
			dirs = append(dirs, path.Dir(rel))
		}
	})
	sort.Strings(dirs)
	return dirs, err
}

// walk calls fn for every file under root outside hidden directories,
// vendor and testdata, with its slash-separated path relative to root.
func walk(root string, fn func(rel string, d fs.DirEntry)) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		fn(filepath.ToSlash(rel), d)
		return nil
	})
}

// ReadCode parses every .go file under root (as walk finds them) for its
// declarations. A file that does not parse is an error naming it.
func ReadCode(root string) (*Code, error) {
	c := &Code{Packages: map[string]*Package{}, ByName: map[string][]string{}, Types: map[string]map[string]bool{}, Tests: map[string]bool{}}
	fset := token.NewFileSet()
	var errs []error
	err := walk(root, func(rel string, d fs.DirEntry) {
		if !strings.HasSuffix(rel, ".go") {
			return
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, filepath.FromSlash(rel)), nil, parser.SkipObjectResolution)
		if err != nil {
			errs = append(errs, err)
			return
		}
		c.add(path.Dir(rel), f, strings.HasSuffix(rel, "_test.go"))
	})
	if err != nil {
		return nil, err
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("reading the code: %w", err)
	}
	for dir, p := range c.Packages {
		c.ByName[p.Name] = append(c.ByName[p.Name], dir)
		for t, members := range p.Types {
			if c.Types[t] == nil {
				c.Types[t] = map[string]bool{}
			}
			for m := range members {
				c.Types[t][m] = true
			}
		}
	}
	for _, dirs := range c.ByName {
		sort.Strings(dirs)
	}
	return c, nil
}

func (c *Code) add(dir string, f *ast.File, test bool) {
	p := c.Packages[dir]
	if p == nil {
		p = &Package{Dir: dir, Names: map[string]bool{}, Types: map[string]map[string]bool{}}
		c.Packages[dir] = p
	}
	// The package's name is its non-test files'; an external test package
	// (x_test) names the same package.
	if name := strings.TrimSuffix(f.Name.Name, "_test"); p.Name == "" || !test {
		p.Name = name
	}
	member := func(typ, name string) {
		if p.Types[typ] == nil {
			p.Types[typ] = map[string]bool{}
		}
		p.Types[typ][name] = true
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				p.Names[d.Name.Name] = true
				if test && isTestName(d.Name.Name) {
					c.Tests[d.Name.Name] = true
				}
				continue
			}
			if typ := receiverType(d.Recv.List[0].Type); typ != "" {
				member(typ, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						p.Names[n.Name] = true
					}
				case *ast.TypeSpec:
					p.Names[s.Name.Name] = true
					if p.Types[s.Name.Name] == nil {
						p.Types[s.Name.Name] = map[string]bool{}
					}
					for _, m := range typeMembers(s.Type) {
						member(s.Name.Name, m)
					}
				}
			}
		}
	}
}

// receiverType is the type name of a method's receiver: T in T, *T, T[K].
func receiverType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.ParenExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// typeMembers lists a struct's fields (an embedded field by its type's
// name) and an interface's methods.
func typeMembers(e ast.Expr) []string {
	var list *ast.FieldList
	switch t := e.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	default:
		return nil
	}
	var names []string
	for _, f := range list.List {
		if len(f.Names) == 0 {
			if n := receiverType(embeddedType(f.Type)); n != "" {
				names = append(names, n)
			}
			continue
		}
		for _, n := range f.Names {
			names = append(names, n.Name)
		}
	}
	return names
}

// embeddedType drops the package of an embedded pkg.T.
func embeddedType(e ast.Expr) ast.Expr {
	if s, ok := e.(*ast.SelectorExpr); ok {
		return s.Sel
	}
	if s, ok := e.(*ast.StarExpr); ok {
		return embeddedType(s.X)
	}
	return e
}

// isTestName says whether a function's name makes it a test, benchmark,
// example or fuzz target for go test.
func isTestName(name string) bool {
	for _, prefix := range []string{"Test", "Benchmark", "Example", "Fuzz"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			if rest == "" || !isLower(rest[0]) {
				return true
			}
		}
	}
	return false
}

func isLower(b byte) bool { return 'a' <= b && b <= 'z' }
