package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An init container installs into a subdirectory of a fresh emptyDir, which
// does not exist yet.
func TestInstallCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bin", "sub")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"install", dir}, envOf(nil), &stdout, &stderr); code != 0 {
		t.Fatalf("install exit %d: %s", code, stderr.String())
	}
	dst := filepath.Join(dir, "proxy-supervisor")
	if got := strings.TrimSpace(stdout.String()); got != dst {
		t.Errorf("printed %q, want %q", got, dst)
	}
	assertInstalled(t, dst)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("DIR holds %v (%v), want the binary alone (no temp file left)", entries, err)
	}
}

// A second install (an init container that runs again) replaces the binary
// whole, even one that is not writable, and keeps the mode.
func TestInstallReplaces(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "proxy-supervisor")
	if err := os.WriteFile(dst, []byte("old"), 0o444); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := run([]string{"install", dir}, envOf(nil), &bytes.Buffer{}, &stderr); code != 0 {
		t.Fatalf("install exit %d: %s", code, stderr.String())
	}
	assertInstalled(t, dst)
}

func TestInstallUsage(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		code int
		err  string
	}{
		{nil, 2, "want exactly one DIR"},
		{[]string{"a", "b"}, 2, "want exactly one DIR"},
		{[]string{file}, 1, "not a directory"},
		{[]string{filepath.Join(file, "sub")}, 1, "not a directory"},
	} {
		var stderr bytes.Buffer
		code := run(append([]string{"install"}, tt.args...), envOf(nil), &bytes.Buffer{}, &stderr)
		msg := stderr.String()
		if code != tt.code || !strings.Contains(msg, tt.err) || strings.Count(msg, "\n") != 1 {
			t.Errorf("install %q: exit %d, %q; want %d and one line with %q", tt.args, code, msg, tt.code, tt.err)
		}
	}
}

func assertInstalled(t *testing.T, dst string) {
	t.Helper()
	fi, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o755 {
		t.Errorf("mode %v, want -rwxr-xr-x", fi.Mode())
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not a copy of the running binary (%d bytes, want %d)", dst, len(got), len(want))
	}
}
