package e2e

import (
	"strings"
	"testing"
)

// --drain-ready-until-hints, the binary on the fake Envoy 1.37: readiness
// stays 200 through the drain delay, so that a Cilium before 1.19 keeps the
// pod's backend and its connections, and turns 503 draining once the
// supervisor has logged the drain call made.
func TestDrainReadyUntilHints(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	// A delay far past any machine's slowness, which the app's close ends
	// early (the hints then go at once): the 200 below is in the delay,
	// however long the test's own steps take.
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-delay", "60s", "--drain-timeout", "90s", "--drain-ready-until-hints"},
		"--fake-version", "1.37", "--drain-strategy", "immediate", "--config-yaml", sidecarBootstrap)
	app := p.serveHTTP("127.0.0.1:8080", "app")
	p.waitHTTP(readyURL, 200, soon)
	hook := p.prestop("--timeout", "100s")
	sup.WaitLog(`msg="drain started"`, soon)
	if code, body := p.get(readyURL); code != 200 {
		t.Fatalf("readiness in the delay: %d %q, want 200", code, body)
	}
	if strings.Contains(sup.Out.String(), "listeners drained") {
		t.Fatal("the hints went before the app closed, in a 60 s delay")
	}
	app.Close()
	sup.WaitLog(`msg="listeners drained"`, soon)
	if body := p.waitHTTP(readyURL, 503, soon); !strings.Contains(body, "draining") {
		t.Errorf("readiness after the drain call: %q, want draining", body)
	}
	if code := hook.Exit(soon); code != 0 {
		t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
	}
	deleted(t, sup)
}
