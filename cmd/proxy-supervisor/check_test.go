package main

import (
	"bytes"
	"net"
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

// A list flag whose value lists nothing ("," or ";") is bad usage, named
// on one line, from the command line or from its variable (issue 38, 6):
// --allowed-uids , passed --check and trusted every uid, as if not given.
// An empty value is still none.
func TestListFlagsThatListNothingAreRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "control")
	sup := func(flags ...string) []string {
		return append(append([]string{"supervise", "--check", "--control-dir", dir}, flags...), "--", "/nonexistent/envoy")
	}
	client := func(cmd string, flags ...string) []string {
		args := append([]string{cmd, "--check", "--control-dir", dir}, flags...)
		if cmd == "exec" {
			args = append(args, "--", "/nonexistent/job")
		}
		return args
	}
	for _, tt := range []struct {
		args []string
		env  map[string]string
		flag string // "" for a value that is fine
	}{
		{sup("--allowed-uids", ","), nil, "--allowed-uids"},
		{sup("--allowed-uids", " , ,"), nil, "--allowed-uids"},
		{sup(), map[string]string{"PROXY_SUPERVISOR_ALLOWED_UIDS": ","}, "--allowed-uids"},
		{sup("--app-ports", ","), nil, "--app-ports"},
		{sup(), map[string]string{"PROXY_SUPERVISOR_APP_PORTS": ","}, "--app-ports"},
		{sup("--peer-restart", ";"), nil, "--peer-restart"},
		{sup("--peer-restart", " ; ;"), nil, "--peer-restart"},
		{sup("--peers", ","), nil, "--peers"},
		{client("wait", "--supervisor-uid", ","), nil, "--supervisor-uid"},
		{client("exec", "--supervisor-uid", ","), nil, "--supervisor-uid"},
		{client("complete", "--supervisor-uid", ","), nil, "--supervisor-uid"},
		{client("prestop", "--supervisor-uid", ","), nil, "--supervisor-uid"},
		{client("status"), map[string]string{"PROXY_SUPERVISOR_SUPERVISOR_UID": ","}, "--supervisor-uid"},
		// Empty is none, and a list with an empty entry lists what it lists.
		{sup("--allowed-uids", ""), nil, ""},
		{sup("--allowed-uids", "1000,,1337,"), nil, ""},
		{sup("--app-ports", "", "--peer-restart", ""), nil, ""},
		{sup("--peer-restart", "app=Never;"), nil, ""},
		{client("wait", "--supervisor-uid", "101,"), nil, ""},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, envOf(tt.env), &stdout, &stderr)
		switch {
		case tt.flag == "" && code != 0:
			t.Errorf("%q %v: exit %d (%q), want 0", tt.args, tt.env, code, stderr.String())
		case tt.flag != "" && (code != 2 || !strings.Contains(stderr.String(), tt.flag) || strings.Count(stderr.String(), "\n") != 1):
			t.Errorf("%q %v: exit %d, stderr %q; want 2 with one line naming %s", tt.args, tt.env, code, stderr.String(), tt.flag)
		}
	}
}

// Only flags on the command line conflict (issue 38, 7): a variable is a
// default, which the other's flag overrides. wait --url exited 2 ("not
// both") when only the environment set PROXY_SUPERVISOR_CONTROL_DIR, as a
// container's env may for every command it runs.
func TestWaitURLAndControlDirFromTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/ready"
	ln.Close() // refused: the URL is polled when its error says so
	const byURL, bySocket = "connection refused", "no supervisor listening on"
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{"--url, the control dir from env", []string{"--url", url}, map[string]string{"PROXY_SUPERVISOR_CONTROL_DIR": dir}, 1, byURL},
		{"--control-dir, the URL from env", []string{"--control-dir", dir}, map[string]string{"PROXY_SUPERVISOR_URL": url}, 1, bySocket},
		{"both from env", nil, map[string]string{"PROXY_SUPERVISOR_URL": url, "PROXY_SUPERVISOR_CONTROL_DIR": dir}, 1, byURL},
		{"both flags", []string{"--url", url, "--control-dir", dir}, nil, 2, "not both"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stderr := runFor(t, append([]string{"wait", "--timeout", "300ms"}, tt.args...), tt.env)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tt.code, tt.want)
			}
			// --check says the same of the command line: bad usage or not.
			check, wantCheck := append([]string{"wait", "--check"}, tt.args...), 0
			if tt.code == 2 {
				wantCheck = 2
			}
			if code, stderr := runFor(t, check, tt.env); code != wantCheck {
				t.Errorf("%q: exit %d (%q), want %d", check, code, stderr, wantCheck)
			}
		})
	}
}
