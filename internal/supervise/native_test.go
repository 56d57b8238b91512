package supervise

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// native is a --native-sidecar supervisor with a drain minimum far longer
// than any of these tests may take: none of them may wait it out but the
// restart's.
func native(drainMin time.Duration) func(*harness, *Config) {
	return func(_ *harness, c *Config) {
		c.Policy = peers.Policy{Count: 1, Native: true}
		c.DrainMin = drainMin
		c.DrainTimeout = 20 * time.Second
	}
}

// The kubelet sends a native sidecar SIGTERM once every regular container
// has exited: the proxy stops at once, with 0, whatever the peers reported
// (a third-party app reports nothing) and whatever --drain-min says.
func TestNativeSigtermAfterTheAppStopsAtOnce(t *testing.T) {
	for _, prestop := range []bool{false, true} {
		name := "SIGTERM alone"
		if prestop {
			name = "after the preStop's drain"
		}
		t.Run(name, func(t *testing.T) {
			h := startSupervisor(t, native(time.Minute))
			h.waitReady()
			if prestop {
				// At a Job's end the hook comes once the app has gone; at a
				// deletion beside the app's SIGTERM. It returns at once:
				// the kubelet holds the SIGTERM until the app has exited.
				ln := h.listenApp()
				start := time.Now()
				if ok, why := h.s.Drain(context.Background()); !ok || why != control.NativeSidecar {
					t.Fatalf("Drain = %v, %q; want true, %q", ok, why, control.NativeSidecar)
				}
				if d := time.Since(start); d > 3*time.Second { // against a --drain-min of a minute
					t.Errorf("the preStop took %v with the app listening; want it at once", d)
				}
				ln.Close()
			}
			start := time.Now()
			h.signal(syscall.SIGTERM)
			if code := h.wait(5 * time.Second); code != 0 {
				t.Fatalf("Run = %d, want 0", code)
			}
			if !h.logged("stop requested", "reason", "the app has exited") {
				t.Error("the stop does not say the app has exited")
			}
			// The stop itself (/quitquitquit) takes tens of milliseconds.
			if d := time.Since(start); d > 3*time.Second { // against a --drain-min of a minute
				t.Errorf("SIGTERM to exit took %v; want the stop alone", d)
			}
		})
	}
}

// The preStop's drain of a native sidecar ends nothing; the SIGTERM's stop
// ends it, and Run returns only once it has ended: a drain left running
// would ask a quitting Envoy (a false "admin /drain_listeners failed") and
// the records the supervisor has closed (a false "the records directory
// was replaced"). Its quiet period is longer than the test, so nothing but
// the stop can end it.
func TestNativeStopEndsThePreStopDrain(t *testing.T) {
	h := startSupervisor(t, func(h *harness, c *Config) {
		native(time.Minute)(h, c)
		c.Intervals.DrainQuiet = time.Hour
	})
	h.waitReady()
	if ok, why := h.s.Drain(context.Background()); !ok || why != control.NativeSidecar {
		t.Fatalf("Drain = %v, %q; want true, %q", ok, why, control.NativeSidecar)
	}
	h.eventually("the drain started", func() bool { return h.logged("drain started") })
	h.signal(syscall.SIGTERM)
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want 0", code)
	}
	if !h.logged("drain ended", "end", "stopped") {
		t.Error("Run returned before the stop had ended the preStop's drain")
	}
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
			t.Errorf("the stop of a native sidecar logged: %s", line)
		}
	}
}

// A hung proxy is what the livenessProbe restarts: a drain would need the
// admin API that does not answer, so the stop starts at once even while the
// app runs.
func TestNativeSigtermOfAHungProxyStopsAtOnce(t *testing.T) {
	h := startSupervisor(t, func(h *harness, c *Config) {
		native(time.Minute)(h, c)
		c.HungAfter = 300 * time.Millisecond
	})
	h.waitReady()
	h.listenApp()
	pid := h.s.proc.Pid()
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGCONT) })
	h.eventually("the proxy is hung", func() bool { hung, _ := h.s.hung(); return hung })
	h.signal(syscall.SIGTERM)
	h.eventually("the stop started", func() bool {
		return h.logged("stop requested", "reason", "the kubelet restarts a hung proxy")
	})
	// A stopped Envoy acts on nothing but SIGKILL, at --stop-timeout.
	if code := h.wait(10 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want 0", code)
	}
}

// Peers that have all reported are the app's end, even while something else
// in the pod listens (another native sidecar's port, still up until this
// one has stopped): the SIGTERM stops at once.
func TestNativeSigtermAfterThePeersEndedIgnoresOtherListeners(t *testing.T) {
	h := startSupervisor(t, native(time.Minute))
	h.waitReady()
	h.listenApp()
	h.complete("app", 0, "")
	h.eventually("the peers settled", func() bool { return h.logged("peers completed; the proxy stays until SIGTERM") })
	h.signal(syscall.SIGTERM)
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want 0", code)
	}
	if !h.logged("stop requested", "reason", "the app has exited") {
		t.Error("the stop does not say the app has exited")
	}
}
