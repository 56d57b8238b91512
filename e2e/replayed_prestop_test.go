package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// The kubelet's preStop, replayed: a kubelet that restarts mid-termination
// may run a container's hook again, and a sidecar restarted during the
// pod's termination (KEP-4438) gets its hook again, maybe before its proxy
// is up.

// A second preStop joins the drain under way and waits with the first for
// its end; a third, once the drain has ended, returns 0. One drain runs,
// and the supervisor exits 0 on the SIGTERM that follows.
func TestPrestopTwiceJoinsOneDrain(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "20s", "--drain-delay", "0s"})
	p.waitHTTP(readyURL, 200, soon)
	app := p.listen("tcp", "127.0.0.1:8080") // holds the drain until it closes
	first := p.prestop("--timeout", "25s")
	p.stillBlocked(sup, first, 200*time.Millisecond)
	second := p.prestop("--timeout", "25s")
	sup.WaitLog("drain already started", soon)
	if second.Exited() {
		t.Fatalf("the second prestop returned while the drain held:\n%s", second.Out.String())
	}
	app.Close()
	for i, hook := range []*proctest.Proc{first, second} {
		if code := hook.Exit(soon); code != 0 {
			t.Fatalf("prestop %d exit %d:\n%s", i+1, code, hook.Out.String())
		}
	}
	third := p.prestop("--timeout", "25s")
	if code := third.Exit(soon); code != 0 {
		t.Fatalf("prestop after the drain's end exit %d:\n%s", code, third.Out.String())
	}
	if n := strings.Count(sup.Out.String(), "drain started"); n != 1 {
		t.Fatalf("%d drains started for three preStops, want 1:\n%s", n, sup.Out.String())
	}
	sup.Signal(syscall.SIGTERM)
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d after the drain and SIGTERM, want 0", code)
	}
}

// A native sidecar that dies mid-termination is started again by a
// kubelet with KEP-4438, which runs its preStop again: here before the new
// proxy is ready. The hook returns at once (it must not hold the pod's
// termination for a proxy that may never start); once the proxy is
// ready, the drain starts at once, and /healthz/ready never says 200 in
// between, so the kubelet never takes the terminating pod's sidecar as
// ready. The app's end and the kubelet's SIGTERM then stop it with 0.
func TestSidecarRestartedMidTerminationDrainsOnceReady(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	flags := []string{"--native-sidecar", "--drain-min", "0s", "--drain-delay", "0s"}
	sup := p.supervise(flags)
	p.waitHTTP(readyURL, 200, soon)
	app := p.listen("tcp", "127.0.0.1:8080")
	if hook := p.prestop(); hook.Exit(soon) != 0 {
		t.Fatalf("the first preStop failed:\n%s", hook.Out.String())
	}
	sup.WaitLog("drain started", soon)
	sup.Kill() // dies mid-termination, the app still running

	// The new proxy stays initializing until the test turns it LIVE,
	// after the replayed hook, however slow the machine.
	ctl := p.dir + "/envoy.sock"
	again := p.supervise(flags, "--stay-initializing", "--control", ctl)
	again.WaitLog("proxy started", soon)
	waitControl(t, ctl)
	p.prestopNeverReady() // the kubelet's replay
	fixture(t, ctl, "state LIVE")
	var last string
	if !proctest.Until(soon, func() bool {
		c, body := p.get(readyURL)
		if c == 200 {
			t.Fatalf("/healthz/ready answered 200 after the replayed preStop: %q", body)
		}
		last = body
		return strings.Contains(again.Out.String(), "drain started")
	}) {
		t.Fatalf("no drain once the proxy was ready (last readiness %q):\n%s", last, again.Out.String())
	}
	out := again.Out.String()
	if ready, drain := strings.Index(out, "proxy ready"), strings.Index(out, "the proxy is ready after a preStop: draining at once"); ready < 0 || drain < ready {
		t.Fatalf("the drain did not start on the proxy's readiness:\n%s", out)
	}
	if c, body := p.get(readyURL); c != 503 || !strings.Contains(body, "draining") || strings.Contains(body, "came before") {
		t.Fatalf("/healthz/ready after the drain started: %d %q, want 503 for the drain under way", c, body)
	}
	// The app's end, then the kubelet's SIGTERM: a native sidecar whose
	// app has gone stops at once, 0.
	app.Close()
	again.Signal(syscall.SIGTERM)
	if code := again.Exit(soon); code != 0 {
		t.Fatalf("the restarted supervisor's exit %d once the app had gone, want 0:\n%s", code, again.Out.String())
	}
	if !strings.Contains(again.Out.String(), "the app has exited (native sidecar)") {
		t.Fatalf("the restarted supervisor did not stop as a native sidecar whose app has gone:\n%s", again.Out.String())
	}
}
