package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

const usage = `usage: repocheck [-C root] <command>

commands:
  docs    README.md and DESIGN.md list every module, link to what exists, name only code that exists
`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "repocheck:", err)
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

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("repocheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	root := fs.String("C", "", "repository root (default: the git top level of the current directory)")
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	if fs.NArg() != 1 {
		return usageError("want one command")
	}
	if *root == "" {
		top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			return fmt.Errorf("finding the repository root (give -C): %w", err)
		}
		*root = strings.TrimSpace(string(top))
	}
	switch cmd := fs.Arg(0); cmd {
	case "docs":
		problems, err := CheckDocs(*root, DocFiles)
		if err != nil {
			return err
		}
		if len(problems) > 0 {
			return fmt.Errorf("%d problem(s) in %s:\n  %s", len(problems), strings.Join(DocFiles, ", "), strings.Join(problems, "\n  "))
		}
		fmt.Fprintf(out, "repocheck docs: %s list every module, link to what exists and name only code that exists\n", strings.Join(DocFiles, " and "))
	default:
		return usageError(fmt.Sprintf("unknown command %q", cmd))
	}
	return nil
}
