package e2e

import (
	"strings"
	"testing"
	"time"
)

const liveURL = "http://127.0.0.1:15022/healthz/live"

// stays asserts that url answers want on every probe for d.
func (p *pod) stays(url string, want int, d time.Duration) {
	p.t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) { // a probe every 50 ms: the span is the claim
		if code, body := p.get(url); code != want {
			p.t.Fatalf("%s answered %d %q, want %d throughout", url, code, body, want)
		}
	}
}

// A ready Envoy whose admin API stops answering fails liveness after
// --hung-after, so that a livenessProbe restarts it; it is live again once
// it answers.
func TestLivenessSeesAHungEnvoy(t *testing.T) {
	p := newPod(t)
	ctl := p.dir + "/envoy.sock"
	sup := p.supervise([]string{"--drain-min", "0s", "--hung-after", "2s"}, "--control", ctl)
	p.waitHTTP(readyURL, 200, soon)
	p.stays(liveURL, 200, 300*time.Millisecond)
	fixture(t, ctl, "silent on")
	hung := time.Now()
	body := p.waitHTTP(liveURL, 503, soon)
	if d := time.Since(hung); d < time.Second { // the last answer was at most a poll (1 s) before
		t.Fatalf("liveness failed %v after the admin API fell silent, before --hung-after 2s less a poll", d)
	}
	if !strings.Contains(body, "has not answered") {
		t.Fatalf("503 without the reason: %q", body)
	}
	fixture(t, ctl, "silent off")
	p.waitHTTP(liveURL, 200, soon)
	deleted(t, sup)
}

// Liveness never fails while the proxy starts (however long its admin API
// is silent) or while it drains.
func TestLivenessHoldsWhileStartingAndDraining(t *testing.T) {
	p := newPod(t)
	ctl := p.dir + "/envoy.sock"
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "20s", "--hung-after", "500ms"},
		"--silent-for", "2s", "--control", ctl)
	sup.WaitLog("proxy started", soon)
	p.stays(liveURL, 200, 1500*time.Millisecond)
	p.waitHTTP(readyURL, 200, soon)
	ln := p.listen("tcp", "127.0.0.1:8080") // holds the drain
	hook := p.prestop("--timeout", "20s")
	sup.WaitLog(`msg="drain started"`, soon)
	fixture(t, ctl, "silent on")
	p.stays(liveURL, 200, 2*time.Second)
	fixture(t, ctl, "silent off")
	ln.Close()
	if code := hook.Exit(soon); code != 0 {
		t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
	}
	deleted(t, sup)
}

// A slow Envoy is not a hung one, nor one that cannot carry traffic: with
// every admin answer 1.2 s late (a main thread busy with a large xDS push),
// past the readiness poll's 0.9 s, readiness and liveness both hold well
// past --hung-after. (Liveness failed after --hung-after, and the
// livenessProbe restarted a working proxy; readiness failed at each late
// answer, and took a working pod out of its Service: issue 35.)
func TestLivenessHoldsForASlowEnvoy(t *testing.T) {
	p := newPod(t)
	ctl := p.dir + "/envoy.sock"
	// Answers are at most a poll (1 s) and an answer (1.2 s) apart, and
	// each comes 1.2 s after its request, within the readiness hold (3 s).
	sup := p.supervise([]string{"--drain-min", "0s", "--hung-after", "4s"}, "--control", ctl)
	p.waitHTTP(readyURL, 200, soon)
	before := p.readyTransitions()
	fixture(t, ctl, "slow 1200ms")
	p.stays(liveURL, 200, 8*time.Second)
	if code, body := p.get(readyURL); code != 200 {
		t.Fatalf("readiness %d %q with every admin answer 1.2 s late, want 200", code, body)
	}
	if after := p.readyTransitions(); after != before {
		t.Fatalf("readiness changed %v times with every admin answer 1.2 s late, want none", after-before)
	}
	fixture(t, ctl, "slow 0")
	deleted(t, sup)
}
