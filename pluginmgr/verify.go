package pluginmgr

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
)

// verifyBinary refuses a missing or non-executable binary before go-plugin
// runs it. The digest is checked by go-plugin's SecureConfig right before
// exec, so the binary is hashed once per start; only a mismatch hashes it
// again, to name the actual digest.
func verifyBinary(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotExecutable, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file (%s)", ErrNotExecutable, path, fi.Mode().Type())
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%w: %s has mode %s", ErrNotExecutable, path, fi.Mode().Perm())
	}
	return nil
}

// VerifyBinary checks what Launch checks before it runs a plugin: path is
// an executable regular file whose SHA-256 is sha256Hex. The error matches
// ErrNotExecutable (and os.ErrNotExist for a missing file) or
// ErrChecksumMismatch (a *ChecksumError naming both digests). Launch itself
// needs no earlier call: it is for checking a configuration ahead of time.
func VerifyBinary(path, sha256Hex string) error {
	if err := verifyBinary(path); err != nil {
		return err
	}
	actual, err := fileSHA256(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotExecutable, err)
	}
	if want := strings.ToLower(sha256Hex); actual != want {
		return &ChecksumError{Path: path, Expected: want, Actual: actual}
	}
	return nil
}

// checksumError reports a digest mismatch with both digests.
func checksumError(path, wantHex string) error {
	actual, err := fileSHA256(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrChecksumMismatch, err)
	}
	return &ChecksumError{Path: path, Expected: wantHex, Actual: actual}
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
