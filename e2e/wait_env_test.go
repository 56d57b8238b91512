package e2e

import (
	"syscall"
	"testing"
)

// wait --url in a container whose environment sets
// PROXY_SUPERVISOR_CONTROL_DIR for every command (issue 38, 7): the
// variable is a default, which the explicit --url overrides. It exited 2,
// "give --control-dir or --url, not both".
func TestWaitURLBesideAControlDirFromTheEnvironment(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s"})
	env := []string{"PROXY_SUPERVISOR_CONTROL_DIR=" + p.dir}
	code, out := p.client(soon, env, "wait", "--url", "http://127.0.0.1:15022/healthz/ready", "--timeout", "10s")
	if code != 0 {
		t.Fatalf("wait --url with PROXY_SUPERVISOR_CONTROL_DIR set: exit %d: %s", code, out)
	}
	sup.Signal(syscall.SIGTERM)
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d, want 0", code)
	}
}
