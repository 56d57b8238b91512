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

// A second preStop joins the drain under way and returns with the first,
// at the drain's end; a third, once the drain has ended, returns at once.
// One drain runs, and the supervisor exits 0 on the SIGTERM that follows.
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
	if gap := second.Ended().Sub(first.Ended()).Abs(); gap > time.Second {
		t.Fatalf("the two hooks returned %v apart; both wait on the one drain's end", gap)
	}
	start := time.Now()
	third := p.prestop("--timeout", "25s")
	if code := third.Exit(soon); code != 0 {
		t.Fatalf("prestop after the drain's end exit %d:\n%s", code, third.Out.String())
	}
	if d := third.Ended().Sub(start); d > 2*time.Second {
		t.Fatalf("prestop after the drain's end took %v; want at once", d)
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

	again := p.supervise(flags, "--init-delay", "1500ms")
	again.WaitLog("proxy started", soon)
	p.prestopNeverReady() // the kubelet's replay
	var last string
	if !proctest.Until(soon, func() bool {
		c, body := p.get(readyURL)
		if c == 200 {
			t.Fatalf("/healthz/ready answered 200 after the replayed preStop: %q", body)
		}
		last = body
		return strings.Contains(again.Out.String(), "the proxy is ready after a preStop: draining at once")
	}) {
		t.Fatalf("no drain once the proxy was ready (last readiness %q):\n%s", last, again.Out.String())
	}
	if c, body := p.get(readyURL); c != 503 || !strings.Contains(body, "draining") {
		t.Fatalf("/healthz/ready after the drain started: %d %q, want 503 draining", c, body)
	}
	app.Close()
	again.Signal(syscall.SIGTERM)
	if code := again.Exit(soon); code != 0 {
		t.Fatalf("the restarted supervisor's exit %d once the app had gone, want 0:\n%s", code, again.Out.String())
	}
}
