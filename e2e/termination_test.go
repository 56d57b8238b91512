package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The end-to-end tests of issue 10's termination points: the restart
// policy, the deletion race, what prestop exits with, and the drain's bound
// from the grace period.

// Under Always (a Deployment) an exec-wrapped app that exits, crashing or
// not, leaves the proxy running and ready for the kubelet's restart of the
// app; the pod's deletion then ends it with 0. The log says how the app
// ended: a crash is never "every peer succeeded".
func TestAlwaysKeepsTheProxyWhenTheAppExits(t *testing.T) {
	for _, tt := range []struct {
		name  string
		env   []string
		flags []string
		code  int
		why   string
	}{
		{"crash, flag", nil, []string{"--restart-policy", "Always"}, 3, `reason="every peer ended; failed: app"`},
		{"success, variable", []string{"PROXY_SUPERVISOR_RESTART_POLICY=Always"}, nil, 0, `reason="every peer succeeded"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newPod(t)
			argv := append([]string{bin.supervisor, "supervise", "--control-dir", p.dir, "--health-addr", "127.0.0.1:15022"}, tt.flags...)
			sup := p.start("supervisor", true, tt.env, append(argv, "--", bin.envoy)...)
			if code := p.app("app", nil, fmt.Sprintf("exit %d", tt.code)).exit(soon); code != tt.code {
				t.Fatalf("app exit %d, want %d", code, tt.code)
			}
			sup.stays("keeping the proxy for its restart (--restart-policy Always)")
			sup.waitLog(tt.why, soon)
			p.waitHTTP(readyURL, 200, soon)
			// The kubelet restarts the app; it runs through the same proxy.
			app := p.app("app", nil, "echo restarted; exec sleep 60")
			app.waitLog("restarted", soon)
			// The pod's deletion: the kubelet sends every container SIGTERM.
			// The running app holds the drain until it has ended.
			app.signal(syscall.SIGTERM)
			sup.deleted()
		})
	}
}

// stays waits for the supervisor to log why it keeps the proxy, and checks
// that it does.
func (pr *proc) stays(why string) {
	pr.t.Helper()
	pr.waitLog(why, soon)
	if pr.wait(500 * time.Millisecond) {
		pr.t.Fatalf("%s exited %d after logging %q", pr.name, pr.code, why)
	}
}

// deleted is the pod's deletion as the proxy container sees it after its
// preStop hook: SIGTERM, after which the supervisor must exit 0.
func (pr *proc) deleted() {
	pr.t.Helper()
	pr.signal(syscall.SIGTERM)
	if code := pr.exit(soon); code != 0 {
		pr.t.Fatalf("%s exit %d on the pod's deletion, want 0", pr.name, code)
	}
}

// --restart-policy OnFailure is what --on-peer-failure=wait was; the two
// spellings disagreeing is bad usage.
func TestRestartPolicyFlags(t *testing.T) {
	p := newPod(t)
	sup := p.supervise([]string{"--restart-policy", "OnFailure"})
	if code := p.app("app", nil, "exit 3").exit(soon); code != 3 {
		t.Fatalf("first run exit %d", code)
	}
	sup.stays("keeping the proxy for its restart (--restart-policy OnFailure)")
	if code := p.app("app", nil, "exit 0").exit(soon); code != 0 {
		t.Fatalf("second run exit %d", code)
	}
	if code := sup.exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d, want 0", code)
	}

	bad := newPod(t).supervise([]string{"--restart-policy", "Never", "--on-peer-failure", "wait"})
	if code := bad.exit(soon); code != 2 || !strings.Contains(bad.out.String(), "--on-peer-failure") {
		t.Fatalf("conflicting restart policies: exit %d, want 2 naming --on-peer-failure:\n%s", code, bad.out.String())
	}
}

// The deletion race: the kubelet SIGTERMs the app and, 0 to 100 ms later,
// runs the proxy's preStop hook, then SIGTERMs the proxy. The app dies at
// once of SIGTERM (signaled, 143). The proxy must take that for the pod's
// deletion: the hook succeeds and the supervisor exits 0. (It exited 143 as
// soon as the app's record arrived, and the hook then failed.)
func TestDeletionRaceExitsZero(t *testing.T) {
	for _, lag := range []time.Duration{0, 30 * time.Millisecond, 100 * time.Millisecond} {
		t.Run(fmt.Sprint(lag), func(t *testing.T) {
			p := newPod(t)
			sup := p.supervise(nil)
			app := p.app("app", nil, "echo running; exec sleep 60")
			app.waitLog("running", soon)

			app.signal(syscall.SIGTERM)
			time.Sleep(lag) // the kubelet's lag between the containers is the scenario
			hook := p.prestop()
			if code := hook.exit(soon); code != 0 {
				t.Fatalf("prestop exit %d, want 0:\n%s", code, hook.out.String())
			}
			if code := app.exit(soon); code != 143 {
				t.Fatalf("app exit %d, want 143", code)
			}
			if sup.wait(0) {
				if sup.code != 0 {
					t.Fatalf("supervisor exit %d on the pod's deletion, want 0", sup.code)
				}
				return
			}
			sup.deleted() // SIGTERM after the hook, as the kubelet sends it
		})
	}
}

// An app that dies of SIGTERM without a deletion (nothing follows within
// the window) still fails the Job with its 143, once the window has passed.
func TestSIGTERMedAppWithoutDeletion(t *testing.T) {
	p := newPod(t)
	sup := p.supervise(nil)
	app := p.app("app", nil, "echo running; exec sleep 60")
	app.waitLog("running", soon)
	app.signal(syscall.SIGTERM)
	if code := app.exit(soon); code != 143 {
		t.Fatalf("app exit %d, want 143", code)
	}
	sup.waitLog("waiting for a pod deletion's preStop or SIGTERM", soon)
	waited := time.Now()
	if code := sup.exit(soon); code != 143 {
		t.Fatalf("supervisor exit %d, want the app's 143", code)
	}
	if d := time.Since(waited); d < time.Second || d > 5*time.Second {
		t.Fatalf("decided %v after the wait began; want the 2 s deletion window", d)
	}
	if !strings.Contains(sup.out.String(), "no pod deletion followed") {
		t.Fatal("the exit does not say no deletion followed")
	}
}

// A preStop while the proxy was never ready returns 0 at once and starts
// no drain (Istio #51883); the supervisor then stops on SIGTERM as before
// readiness. (It started a drain from starting and held the hook to the
// drain's bound.)
func TestPrestopBeforeReady(t *testing.T) {
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "30s", "--drain-timeout", "30s"}, "--init-delay", "1m")
	sup.waitLog("proxy started", soon)
	start := time.Now()
	code, out := p.client(soon, nil, "prestop", "--control-dir", p.dir)
	if code != 0 || !strings.Contains(out, "never ready") {
		t.Fatalf("prestop before ready: exit %d, %q; want 0 saying the proxy was never ready", code, out)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("prestop took %v before ready; want at once", d)
	}
	if strings.Contains(sup.out.String(), "drain started") {
		t.Fatal("a drain started although the proxy was never ready")
	}
	sup.signal(syscall.SIGTERM)
	if code := sup.exit(soon); code != 143 {
		t.Fatalf("supervisor exit %d, want 143 for SIGTERM before ready", code)
	}
}

// prestop with no supervisor to answer (the proxy container has exited):
// the pod may go on terminating, so the hook succeeds and says why.
func TestPrestopWithoutSupervisor(t *testing.T) {
	p := newPod(t)
	code, out := p.client(soon, nil, "prestop", "--control-dir", p.dir)
	if code != 0 || !strings.Contains(out, "no supervisor is listening") {
		t.Fatalf("prestop without a supervisor: exit %d, %q; want 0 saying none listens", code, out)
	}
}

// --grace-period without --drain-timeout bounds the drain: 12 s less the
// 5 s stop and the 5 s margin leaves 2 s, not the default 20 s.
func TestGracePeriodBoundsTheDrain(t *testing.T) {
	p := newPod(t)
	sup := p.supervise([]string{"--grace-period", "12s", "--drain-min", "0s"})
	sup.waitLog("drain bound derived from the grace period", soon)
	p.waitHTTP(readyURL, 200, soon)
	p.listen("tcp", "127.0.0.1:8080") // never closed
	start := time.Now()
	hook := p.prestop()
	if code := hook.exit(soon); code != 0 {
		t.Fatalf("prestop exit %d:\n%s", code, hook.out.String())
	}
	if d := time.Since(start); d < 1500*time.Millisecond || d > 5*time.Second {
		t.Fatalf("prestop returned after %v; want the derived 2 s bound", d)
	}
	sup.deleted()
}

// A 120 s grace period drains up to 110 s; one too short for any drain is
// refused at start.
func TestGracePeriodDerivation(t *testing.T) {
	p := newPod(t)
	sup := p.supervise([]string{"--grace-period", "120s"})
	sup.waitLog("drain_timeout=1m50s", soon)
	p.waitHTTP(readyURL, 200, soon)
	sup.deleted()

	short := newPod(t).supervise([]string{"--grace-period", "10s"})
	if code := short.exit(soon); code != 2 || !strings.Contains(short.out.String(), "--grace-period") {
		t.Fatalf("--grace-period 10s: exit %d, want 2 naming the flag:\n%s", code, short.out.String())
	}
}
