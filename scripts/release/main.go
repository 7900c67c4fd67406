package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

const usage = `usage: release [-C root] <command> [arguments]

commands:
  check                      the release rules (see go doc)
  prepare SET                require SET's modules at its version in every go.mod, write
                             the chart's versions and plugin SHA-256, and the release notes
  tag SET                    tag every module of SET as <dir>/<version>, siblings first
  proxy DIR                  write a module proxy (GOPROXY=file://DIR) from the release tags
  consumers [-app DIR]... PROXYDIR
                             build each released module, and each app, as a user would
  apicheck [-gorelease BIN] [MODULE...]
                             gorelease against each module's last release tag
`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		var u usageError
		if errors.As(err, &u) {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError string

func (e usageError) Error() string { return string(e) }

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	root := fs.String("C", "", "repository root (default: the git top level of the current directory)")
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	if fs.NArg() == 0 {
		return usageError("no command")
	}
	if *root == "" {
		top, err := git(".", "rev-parse", "--show-toplevel")
		if err != nil {
			return err
		}
		*root = top
	}
	r, err := OpenRepo(*root)
	if err != nil {
		return err
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	one := func(what string) (string, error) {
		if len(rest) != 1 {
			return "", usageError(fmt.Sprintf("%s wants one %s", cmd, what))
		}
		return rest[0], nil
	}
	switch cmd {
	case "check":
		if len(rest) != 0 {
			return usageError("check takes no arguments")
		}
		if problems := Check(r); len(problems) > 0 {
			return fmt.Errorf("%d problem(s):\n  %s", len(problems), strings.Join(problems, "\n  "))
		}
		fmt.Fprintf(out, "release check: %d workspace modules, %d module set(s): versions and requirements agree\n", len(r.Work), len(r.Versions.Sets))
	case "prepare":
		set, err := one("module set")
		if err != nil {
			return err
		}
		changes, err := Prepare(r, set)
		for _, c := range changes {
			fmt.Fprintln(out, c)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "release prepare %s: %d change(s)\n", set, len(changes))
	case "tag":
		set, err := one("module set")
		if err != nil {
			return err
		}
		tags, err := Tag(r, set)
		for _, t := range tags {
			fmt.Fprintln(out, "tagged", t)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "release tag %s: %d tag(s) created, none pushed\n", set, len(tags))
	case "proxy":
		dir, err := one("directory")
		if err != nil {
			return err
		}
		held, err := BuildProxy(r, dir)
		if err != nil {
			return err
		}
		for _, m := range held {
			fmt.Fprintln(out, m)
		}
		abs, _ := filepath.Abs(dir)
		fmt.Fprintf(out, "release proxy: %d module version(s); GOPROXY=file://%s\n", len(held), filepath.ToSlash(abs))
	case "consumers":
		cfs := flag.NewFlagSet("consumers", flag.ContinueOnError)
		cfs.SetOutput(io.Discard)
		var apps stringList
		cfs.Var(&apps, "app", "an unreleased module built against the released ones only (repeatable)")
		if err := cfs.Parse(rest); err != nil {
			return usageError(err.Error())
		}
		if cfs.NArg() != 1 {
			return usageError("consumers wants the proxy directory")
		}
		for _, a := range apps {
			if r.Modules[a] == nil {
				return fmt.Errorf("-app %q: no such module directory", a)
			}
		}
		return Consumers(r, cfs.Arg(0), apps, out)
	case "apicheck":
		afs := flag.NewFlagSet("apicheck", flag.ContinueOnError)
		afs.SetOutput(io.Discard)
		bin := afs.String("gorelease", "", "gorelease binary (default: built from the version this module pins)")
		if err := afs.Parse(rest); err != nil {
			return usageError(err.Error())
		}
		return APICheck(r, afs.Args(), *bin, out)
	default:
		return usageError(fmt.Sprintf("unknown command %q", cmd))
	}
	return nil
}
