package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
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
	if why := noexec(rest[0]); why != "" {
		fmt.Fprintf(stderr, "proxy-supervisor: install: warning: %s\n", why)
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

// noexec says, in one line, why app containers may not run the copy in
// dir, or "" when its mount here lets binaries run. An app container whose
// mount of the volume is noexec too (KEP-5855's noexec volume mounts, alpha in
// 1.37, or a node whose kubelet directory is noexec, which every bind mount
// of it inherits) fails to start with runc's bare "permission denied". It
// is a warning, not a failure: only this container's mount is seen here,
// and a native sidecar's apps may not run the binary at all.
func noexec(dir string) string {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil || st.Flags&unix.ST_NOEXEC == 0 {
		return ""
	}
	return dir + " is on a noexec mount here: an app container whose mount of it is noexec too (KEP-5855's noexec volume mounts, or a noexec kubelet directory) cannot run the binary from it and fails to start with \"permission denied\"; put the binary in the app's image (docs/images.md)"
}
