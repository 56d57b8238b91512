package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func runInstall(args []string, env func(string) string, stdout, stderr io.Writer) int {
	f := newFlags("install", "install DIR", "Copies this binary to DIR/proxy-supervisor atomically, mode 0755, creating DIR, for app containers that mount DIR read-only (an init container's job).")
	rest, code, done := parseOrExit(f, args, env, stdout, stderr)
	if done {
		return code
	}
	if len(rest) != 1 {
		fmt.Fprintln(stderr, "proxy-supervisor: install: want exactly one DIR")
		return 2
	}
	if f.checkOnly() {
		return 0
	}
	dst, err := install(rest[0])
	if err != nil {
		fmt.Fprintf(stderr, "proxy-supervisor: install: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, dst)
	return 0
}

// install copies the running binary into dir atomically (a temp file renamed
// over the old one), so that an app container never sees half a binary and a
// second install never writes into a file another container runs. dir is
// created: it is usually a subdirectory of a fresh emptyDir.
func install(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the running binary: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return "", err
	}
	defer src.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".proxy-supervisor-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, src)
	err = errors.Join(err, tmp.Chmod(0o755), tmp.Sync(), tmp.Close())
	if err != nil {
		return "", fmt.Errorf("copy %s: %w", self, err)
	}
	dst := filepath.Join(dir, "proxy-supervisor")
	return dst, os.Rename(tmp.Name(), dst)
}
