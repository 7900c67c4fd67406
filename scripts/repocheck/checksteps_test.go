package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// checkSteps runs scripts/check-steps.sh with a fake make that runs each
// step as a shell script of steps (name -> script), serial first, then the
// parallel ones. It returns the script's output and whether it passed. The
// scripts find the test's directory in $OUT.
func checkSteps(t *testing.T, out string, steps map[string]string, serial, parallel []string) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	for name, script := range steps {
		if err := os.WriteFile(filepath.Join(dir, name+".sh"), []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// make --no-print-directory STEP: run STEP's script.
	fakeMake := filepath.Join(dir, "make")
	if err := os.WriteFile(fakeMake, []byte("#!/bin/sh\nexec sh \""+dir+"/$2.sh\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("../check-steps.sh")
	if err != nil {
		t.Fatal(err)
	}
	args := append(append(append([]string{}, serial...), "--"), parallel...)
	cmd := exec.Command(script, args...)
	cmd.Env = append(os.Environ(), "MAKE="+fakeMake, "OUT="+out, "CHECK_JOBS=2",
		"CHECK_TIMES="+filepath.Join(dir, "times"), "CHECK_LOGS="+filepath.Join(dir, "logs"))
	b, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	t.Logf("check-steps.sh %s:\n%s", strings.Join(args, " "), b)
	return string(b), err == nil
}

// stepTmpdir reads the TMPDIR a step wrote to $OUT/tmpdir and checks that
// it was private and short, and is gone after the check.
func stepTmpdir(t *testing.T, out string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "tmpdir"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := strings.TrimSpace(string(b))
	// compat/e2e's agent sockets take 86 bytes plus TMPDIR's length of
	// sun_path's 107.
	if !strings.HasPrefix(tmp, "/tmp/dc.") || len(tmp) > 14 {
		t.Errorf("the steps' TMPDIR is %q, want /tmp/dc.XXXXXX (short: socket paths)", tmp)
	}
	if tmp == os.Getenv("TMPDIR") {
		t.Errorf("the steps' TMPDIR is the caller's, %q, want one of the check's own", tmp)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("the steps' TMPDIR %s is still there after the check (%v)", tmp, err)
	}
}

// A file a step leaves in its TMPDIR fails the check, named, even when
// every step passed; files a step makes and removes do not.
func TestCheckStepsFailsOnWhatAStepLeaves(t *testing.T) {
	out := t.TempDir()
	output, ok := checkSteps(t, out, map[string]string{
		"generate": `echo "$TMPDIR" > "$OUT/tmpdir" && stat -c %a "$TMPDIR" > "$OUT/tmpmode"`,
		"tidy":     `f=$(mktemp) && rm "$f"`,
		"leaky":    `mkdir "${TMPDIR:?}/dranode-plugin-42" && touch "$TMPDIR/dranode-plugin-42/plugin7"`,
	}, []string{"generate"}, []string{"tidy", "leaky"})
	if ok {
		t.Fatal("check-steps.sh passed with a file left in its TMPDIR")
	}
	// The list is the output's end, where CI's excerpt of it is.
	at := strings.LastIndex(output, "==> leaky left these in its TMPDIR")
	if at < 0 {
		t.Fatal("the output does not name leaky as the step that left files")
	}
	tail := output[at:]
	for _, want := range []string{"    dranode-plugin-42\n", "    dranode-plugin-42/plugin7\n", "==> check FAILED in: TMPDIR leftovers of leaky\n"} {
		if !strings.Contains(tail, want) {
			t.Errorf("the output's end lacks %q", want)
		}
	}
	if strings.Contains(output, "tidy left") {
		t.Error("the output blames tidy, which removed what it made")
	}
	stepTmpdir(t, out)
	// A test may run a binary as another user from its TMPDIR (agent's
	// config validate as nobody): the directory is /tmp's mode, not
	// mktemp's 0700.
	if b, err := os.ReadFile(filepath.Join(out, "tmpmode")); err != nil || strings.TrimSpace(string(b)) != "1777" {
		t.Errorf("the steps' TMPDIR has mode %q (%v), want 1777 as /tmp", strings.TrimSpace(string(b)), err)
	}
}

// What other programs write to /tmp while the check runs is not the
// steps': here the test writes a file in /tmp while a step runs, and the
// check passes.
func TestCheckStepsIgnoresOtherProgramsFiles(t *testing.T) {
	out := t.TempDir()
	for _, fifo := range []string{"running", "written"} {
		if err := exec.Command("mkfifo", filepath.Join(out, fifo)).Run(); err != nil {
			t.Fatal(err)
		}
	}
	var other string
	t.Cleanup(func() {
		if other != "" {
			os.Remove(other)
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The step opens "running" once it runs: then another program
		// writes to /tmp, and tells the step by opening "written".
		running, err := os.OpenFile(filepath.Join(out, "running"), os.O_RDONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		running.Close()
		f, err := os.CreateTemp("/tmp", "other-program-")
		if err != nil {
			t.Error(err)
		} else {
			other = f.Name()
			f.Close()
		}
		written, err := os.OpenFile(filepath.Join(out, "written"), os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		written.Close()
	}()
	output, ok := checkSteps(t, out, map[string]string{
		"generate": `echo "$TMPDIR" > "$OUT/tmpdir"`,
		"long":     `: > "$OUT/running" && cat "$OUT/written" && f=$(mktemp -d) && rmdir "$f"`,
		"short":    `true`,
	}, []string{"generate"}, []string{"long", "short"})
	<-done
	if !ok {
		t.Fatalf("check-steps.sh failed while another program wrote %s:\n%s", other, output)
	}
	if other == "" {
		t.Fatal("the other program wrote nothing to /tmp")
	}
	stepTmpdir(t, out)
}
