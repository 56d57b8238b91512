package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --check validates a command line and acts on nothing: the manifests'
// command lines are tested with it.
func TestCheck(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "control")
	for _, tt := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"supervise", "--check", "--control-dir", dir, "--peers", "job,uploader", "--on-peer-failure", "wait", "--", "/nonexistent/envoy"}, 0, ""},
		{[]string{"supervise", "--check", "--on-peer-failure", "never", "--", "envoy"}, 2, "--on-peer-failure"},
		{[]string{"supervise", "--check", "--peers", "Bad Name", "--", "envoy"}, 2, "Bad Name"},
		{[]string{"supervise", "--check", "--drain-timeout", "0s", "--", "envoy"}, 2, "--drain-timeout"},
		{[]string{"supervise", "--check", "--admin-url", "unix:///" + strings.Repeat("a", 107), "--", "envoy"}, 2, "--admin-url"},
		{[]string{"supervise", "--check", "--admin-url", "unix:///" + strings.Repeat("a", 106), "--", "/nonexistent/envoy"}, 0, ""},
		{[]string{"supervise", "--check"}, 2, "no COMMAND"},
		{[]string{"exec", "--check", "--control-dir", dir, "--name", "job", "--", "/nonexistent/job"}, 0, ""},
		{[]string{"exec", "--check", "--name", "job"}, 2, "no COMMAND"},
		{[]string{"complete", "--check", "--control-dir", dir, "--exit-code", "3"}, 0, ""},
		{[]string{"complete", "--check", "--exit-code", "300"}, 2, "--exit-code"},
		{[]string{"wait", "--check", "--control-dir", dir}, 0, ""},
		{[]string{"wait", "--check", "--timeout", "-1s"}, 2, "--timeout"},
		{[]string{"prestop", "--check", "--control-dir", dir}, 0, ""},
		{[]string{"prestop", "--check", "--timeout", "x"}, 2, "--timeout"},
		{[]string{"status", "--check", "--control-dir", dir}, 0, ""},
		{[]string{"install", "--check", dir}, 0, ""},
		{[]string{"install", "--check"}, 2, "DIR"},
		{[]string{"wait", "--check", "--bogus"}, 2, "--bogus"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, envOf(nil), &stdout, &stderr)
		out := stdout.String() + stderr.String()
		switch {
		case code != tt.code:
			t.Errorf("%q: exit %d (%q), want %d", tt.args, code, out, tt.code)
		case tt.code == 0 && out != "":
			t.Errorf("%q: printed %q, want nothing", tt.args, out)
		case tt.code != 0 && (!strings.Contains(stderr.String(), tt.err) || strings.Count(stderr.String(), "\n") != 1):
			t.Errorf("%q: stderr %q, want one line with %q", tt.args, stderr.String(), tt.err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("--check touched %s: %v", dir, err)
	}
}

// The environment never turns --check on: a stray variable must not make the
// proxy container a no-op.
func TestCheckNotFromEnv(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bin")
	var stderr bytes.Buffer
	code := run([]string{"install", dir}, envOf(map[string]string{"PROXY_SUPERVISOR_CHECK": "true"}), &bytes.Buffer{}, &stderr)
	if code != 0 {
		t.Fatalf("install exit %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "proxy-supervisor")); err != nil {
		t.Errorf("install did not install: %v", err)
	}
}
