package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// Issue 26, 2.2: SIGTERM while the proxy starts decides 143 and the stop;
// the proxy then ignores /quitquitquit and SIGTERM, and becomes LIVE before
// the SIGKILL at --stop-timeout. That first readiness came after the stop
// was decided, and no reader may take it: /v1/ready once answered 200, the
// socket got its ready mark, wait exited 0 and a waiting exec ran its
// COMMAND against a proxy killed a moment later, and the termination
// message said "ready ... after start".
func TestNoFirstReadinessAfterTheStopIsDecided(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	ctl := p.dir + "/envoy.sock"
	msg := p.dir + "/termination-log"
	if err := writeFile(msg, "", 0o644); err != nil {
		t.Fatal(err)
	}
	// The proxy lives --stop-timeout after the stop: the window in which it
	// goes LIVE.
	sup := p.supervise([]string{"--quit-grace", "1s", "--stop-timeout", "3s", "--termination-log", msg},
		"--stay-initializing", "--hang-on-term", "--control", ctl)
	sup.WaitLog("proxy started", soon)
	waitControl(t, ctl) // the test turns it LIVE through it below

	ran := filepath.Join(p.dir, "ran")
	// Their bound outlasts the supervisor: they must give up because the
	// proxy never was ready, not because it came too late for them.
	app := p.start("exec", false, nil, bin.supervisor, "exec", "--name", "app", "--control-dir", p.dir, "--timeout", "7s", "--", "touch", ran)
	waiter := p.start("wait", false, nil, bin.supervisor, "wait", "--control-dir", p.dir, "--timeout", "7s")
	waitRecord(t, p.dir, "app", `"running":true`)

	sup.Signal(syscall.SIGTERM)
	sup.WaitLog("stop requested", soon)
	fixture(t, ctl, "state LIVE")
	sup.WaitLog("proxy ready", soon) // the tracker saw it, with the proxy still alive
	for _, c := range []*proctest.Proc{app, waiter} {
		if c.Exited() && c.Code() != 0 {
			t.Fatalf("a client gave up before the proxy went LIVE, which proves nothing:\n%s", c.Out.String())
		}
	}

	// While the proxy still runs: no reader takes it as ready.
	ctx, cancel := context.WithTimeout(context.Background(), soon)
	ready, why, err := control.NewClient(p.dir).Ready(ctx, 0)
	cancel()
	if err != nil || ready {
		t.Errorf("/v1/ready after the stop was decided: ready %v (%s), err %v; want not ready", ready, why, err)
	}
	if fi, err := os.Stat(control.SocketPath(p.dir)); err == nil && fi.Mode()&os.ModeSticky != 0 {
		t.Error("the socket carries the ready mark after the stop was decided")
	}
	if code, body := p.get(readyURL); code != 503 {
		t.Errorf("/healthz/ready: %d %q, want 503", code, body)
	}

	if code := sup.Exit(soon); code != 143 {
		t.Errorf("supervisor exit %d, want 143 (SIGTERM before ready)", code)
	}
	if code := app.Exit(soon); code != 69 {
		t.Errorf("exec exit %d, want 69 (the proxy never ready):\n%s", code, app.Out.String())
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("exec ran its COMMAND against a proxy that was being stopped")
	}
	if code := waiter.Exit(soon); code == 0 {
		t.Errorf("wait exited 0 for a proxy that was being stopped:\n%s", waiter.Out.String())
	}
	b, err := lastBytes(msg, 4096) // what the kubelet reads
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "never ready") {
		t.Errorf("termination message %q; want it to say never ready", b)
	}
}

// waitControl waits until the fake Envoy's control socket ctl takes a
// connection: it is the fake's own, made as it starts, and its file
// appears at bind, before the listen.
func waitControl(t *testing.T, ctl string) {
	t.Helper()
	if !proctest.Until(soon, func() bool {
		c, err := net.Dial("unix", ctl)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatalf("the fake Envoy's control socket %s takes no connection", ctl)
	}
}
