package e2e

import (
	"strings"
	"testing"
	"time"
)

// --drain-ready-until-hints, the binary on the fake Envoy 1.37: readiness
// stays 200 through the drain delay, so that a Cilium before 1.19 keeps the
// pod's backend and its connections, and turns 503 draining once the
// supervisor has logged the drain call made.
func TestDrainReadyUntilHints(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-delay", "2s", "--drain-ready-until-hints"},
		"--fake-version", "1.37", "--drain-strategy", "immediate", "--config-yaml", sidecarBootstrap)
	app := p.serveHTTP("127.0.0.1:8080", "app")
	p.waitHTTP(readyURL, 200, soon)
	hook := p.prestop()
	sup.WaitLog(`msg="drain started"`, soon)
	code, body := p.get(readyURL)
	probed := time.Now()
	if code != 200 {
		t.Fatalf("readiness in the delay: %d %q, want 200", code, body)
	}
	sup.WaitLog(`msg="listeners drained"`, soon)
	if hinted := logTime(t, sup.Out.String(), "listeners drained"); !probed.Before(hinted) {
		t.Fatalf("the 200 came at %v, not before the drain call at %v", probed, hinted)
	}
	// Well before the drain's bound (20s), whose end would withdraw it too.
	if body := p.waitHTTP(readyURL, 503, 5*time.Second); !strings.Contains(body, "draining") {
		t.Errorf("readiness after the drain call: %q, want draining", body)
	}
	app.Close()
	if code := hook.Exit(soon); code != 0 {
		t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
	}
	deleted(t, sup)
}
