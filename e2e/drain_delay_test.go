package e2e

import (
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// logTime is when the supervisor logged the first line with msg.
func logTime(t *testing.T, out, msg string) time.Time {
	t.Helper()
	m := regexp.MustCompile(`time=(\S+) level=\w+ msg="` + regexp.QuoteMeta(msg) + `"`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q line in:\n%s", msg, out)
	}
	at, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// --drain-delay, the binary on the fake Envoy 1.37 (which takes
// graceful&inboundonly&skip_exit): readiness turns 503 at the preStop, but
// the inbound keep-alive is not told to close and no drain call is made
// while the delay runs; a new connection is served meanwhile. The delay
// ends at its time, or at once when the app stops listening, and the hint
// goes then.
func TestDrainDelay(t *testing.T) {
	t.Parallel()
	// delayed is a pod whose supervisor has the delay given, an inbound
	// keep-alive through Envoy to the app, and its preStop begun.
	delayed := func(t *testing.T, delay string) (p *pod, sup, hook *proctest.Proc, app net.Listener, in *keepAlive) {
		t.Parallel()
		p = newPod(t)
		sup = p.supervise([]string{"--drain-min", "0s", "--drain-delay", delay}, "--fake-version", "1.37", "--drain-strategy", "immediate", "--config-yaml", sidecarBootstrap)
		app = p.serveHTTP("127.0.0.1:8080", "app")
		p.waitHTTP(readyURL, 200, soon)
		in = p.keepAlive(t, "127.0.0.1:9000")
		in.get()
		return p, sup, p.prestop(), app, in
	}
	t.Run("passes", func(t *testing.T) {
		_, sup, hook, app, in := delayed(t, "1s")
		sup.WaitLog(`msg="drain delay over; the close hints go now" trigger=preStop reason="delay passed"`, soon)
		sup.WaitLog(`msg="listeners drained"`, soon)
		out := sup.Out.String()
		if d := logTime(t, out, "listeners drained").Sub(logTime(t, out, "drain started")); d < time.Second {
			t.Errorf("the drain call came %v after the drain's start, within the 1s delay", d)
		}
		if _, closing := in.get(); !closing {
			t.Error("the inbound keep-alive was not told to close after the delay")
		}
		app.Close()
		if code := hook.Exit(soon); code != 0 {
			t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
		}
		deleted(t, sup)
	})
	t.Run("the app stops listening", func(t *testing.T) {
		p, sup, hook, app, in := delayed(t, "15s")
		p.stillBlocked(sup, hook, 300*time.Millisecond) // readiness 503 meanwhile
		if body, closing := in.get(); body != "app" || closing {
			t.Errorf("inbound keep-alive in the delay: %q, told to close %v", body, closing)
		}
		if body, closing := p.keepAlive(t, "127.0.0.1:9000").get(); body != "app" || closing {
			t.Errorf("a new inbound connection in the delay: %q, told to close %v", body, closing)
		}
		if strings.Contains(sup.Out.String(), "listeners drained") {
			t.Fatalf("a drain call in the delay:\n%s", sup.Out.String())
		}
		app.Close()
		sup.WaitLog(`reason="the app listens on no port"`, soon)
		sup.WaitLog(`msg="listeners drained"`, soon)
		if code := hook.Exit(soon); code != 0 || !strings.Contains(hook.Out.String(), "drained") {
			t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
		}
		deleted(t, sup)
	})
}
