package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/dranode/dranode/scripts/image/images"
)

const usage = `usage: image [-C root] <command> [arguments]

commands:
  build [-out DIR] [-tag T] [-arch GOARCH] [-revision R] [IMAGE...]
                            build the images (default all: %s) as OCI layouts
                            under DIR/<image> (default <root>/bin/images), each
                            an index for linux/amd64 and linux/arm64 (-arch: one)
                            with an SPDX SBOM per image; -revision names the
                            source revision (default: git HEAD of root)
  archive LAYOUT FILE       write the layout as an OCI archive tar for "ctr images import"
  push LAYOUT REFERENCE     push the layout's image to a registry (default keychain)
  digests [-arch GOARCH] LAYOUT
                            print the sha256 of each driver plugin in the image
                            (default this machine's architecture), as chart values
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		var u usageError
		if errors.As(err, &u) {
			fmt.Fprintf(os.Stderr, usage, strings.Join(images.Names(), ", "))
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError string

func (e usageError) Error() string { return string(e) }

func run(ctx context.Context, args []string, out, log io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	root := fs.String("C", "", "repository root (default: the git top level of the current directory)")
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	if fs.NArg() == 0 {
		return usageError("no command")
	}
	if *root != "" {
		a, err := filepath.Abs(*root)
		if err != nil {
			return err
		}
		*root = a
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	// Relative paths in arguments are relative to -C when it is given, as
	// with make -C and git -C.
	abs := func(p string) string {
		if filepath.IsAbs(p) || *root == "" {
			return p
		}
		return filepath.Join(*root, p)
	}
	switch cmd {
	case "build":
		bf := flag.NewFlagSet("build", flag.ContinueOnError)
		bf.SetOutput(io.Discard)
		o := images.Options{Log: log}
		bf.StringVar(&o.Out, "out", "", "output directory (default <root>/bin/images)")
		bf.StringVar(&o.Tag, "tag", "", "image tag (default the agent's version in versions.yaml)")
		bf.StringVar(&o.Arch, "arch", "", "build only this GOARCH (default: an index of linux/amd64 and linux/arm64)")
		bf.StringVar(&o.Revision, "revision", "", "the source revision annotation (default: git HEAD of the root; give it for a tree that is no git work tree)")
		if err := bf.Parse(rest); err != nil {
			return usageError("build: " + err.Error())
		}
		if *root == "" {
			top, err := gitTop()
			if err != nil {
				return err
			}
			*root = top
		}
		o.Root = *root
		if o.Out != "" {
			o.Out = abs(o.Out)
		}
		o.Images = bf.Args()
		epoch, err := images.SourceDateEpochFromEnv()
		if err != nil {
			return err
		}
		o.SourceDateEpoch = epoch
		built, err := images.Build(ctx, o)
		if err != nil {
			return err
		}
		names := o.Images
		if len(names) == 0 {
			names = images.Names()
		}
		for _, n := range names {
			l := built[n]
			fmt.Fprintf(out, "%s\t%s\t%s\t%d\n", l.Dir, l.Ref, l.Digest, l.Size)
		}
	case "archive":
		if len(rest) != 2 {
			return usageError("archive wants a layout directory and a file")
		}
		if err := images.ArchiveFile(abs(rest[0]), abs(rest[1])); err != nil {
			return err
		}
		fmt.Fprintln(out, abs(rest[1]))
	case "push":
		if len(rest) != 2 {
			return usageError("push wants a layout directory and a reference")
		}
		digest, err := images.Push(ctx, abs(rest[0]), rest[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s@%s\n", rest[1], digest)
	case "digests":
		df := flag.NewFlagSet("digests", flag.ContinueOnError)
		df.SetOutput(io.Discard)
		arch := df.String("arch", runtime.GOARCH, "the GOARCH of the image in the index")
		if err := df.Parse(rest); err != nil {
			return usageError("digests: " + err.Error())
		}
		if df.NArg() != 1 {
			return usageError("digests wants a layout directory")
		}
		l, err := images.ReadLayout(abs(df.Arg(0)))
		if err != nil {
			return err
		}
		plugins, err := images.PluginDigestsFor(l.Dir, *arch)
		if err != nil {
			return err
		}
		if len(plugins) == 0 {
			return fmt.Errorf("%s: no driver plugins under %s in %s", l.Dir, images.PluginDir, l.Ref)
		}
		return images.WriteChartValues(out, l.Ref, plugins)
	default:
		return usageError(fmt.Sprintf("unknown command %q", cmd))
	}
	return nil
}

func gitTop() (string, error) {
	b, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("no -C and not in a git repository: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
