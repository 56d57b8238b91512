package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// prestop runs the preStop hook in the background.
func (p *pod) prestop(flags ...string) *proctest.Proc {
	return p.start("prestop", false, nil, append([]string{bin.supervisor, "prestop", "--control-dir", p.dir}, flags...)...)
}

// stillBlocked asserts, once sup has started the drain, that pr is still
// running after d, and that readiness is 503 meanwhile.
func (p *pod) stillBlocked(sup, pr *proctest.Proc, d time.Duration) {
	p.t.Helper()
	sup.WaitLog(`msg="drain started"`, soon)
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if code, _ := p.get(readyURL); code != 503 {
			p.t.Fatalf("readiness %d during the drain, want 503", code)
		}
		if pr.Wait(50 * time.Millisecond) {
			p.t.Fatalf("%s returned (%d) while it should block:\n%s", pr.Name, pr.Code(), pr.Out.String())
		}
	}
}

func TestPrestopWaitsForAppPorts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, network, addr string }{
		{"ipv4", "tcp4", "127.0.0.1:8080"},
		{"ipv6 only", "tcp6", "[::1]:8080"},
		{"wildcard", "tcp", ":8080"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPod(t)
			sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "20s"})
			p.waitHTTP(readyURL, 200, soon)
			ln := p.listen(tt.network, tt.addr)
			hook := p.prestop()
			p.stillBlocked(sup, hook, time.Second)
			ln.Close()
			closed := time.Now()
			if code := hook.Exit(soon); code != 0 {
				t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
			}
			if d := time.Since(closed); d > 3*time.Second {
				t.Fatalf("prestop returned %v after the port closed", d)
			}
			if code, _ := p.get(readyURL); code != 503 {
				t.Fatalf("readiness %d after the drain, want 503", code)
			}
			// The proxy still runs: preStop alone stops nothing.
			if sup.Wait(200 * time.Millisecond) {
				t.Fatalf("supervisor exited %d on preStop", sup.Code())
			}
			deleted(t, sup)
			if n := strings.Count(sup.Out.String(), `msg="drain started"`); n != 1 {
				t.Fatalf("%d drains started; preStop and SIGTERM share one", n)
			}
		})
	}
}

// An open connection through Envoy holds the drain until it closes.
func TestOpenConnectionHoldsDrain(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "20s"},
		"--listener", "inbound=127.0.0.1:9000,inbound,tcp")
	p.waitHTTP(readyURL, 200, soon)
	conn, err := p.netns.Dial(context.Background(), "tcp", "127.0.0.1:9000")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	p.envoyStat("listener.127.0.0.1_9000.downstream_cx_active", 1) // Envoy has accepted it
	hook := p.prestop()
	// Envoy's own listener on 9000 is not the app's; only the connection
	// holds the drain.
	p.stillBlocked(sup, hook, time.Second)
	conn.Close()
	if code := hook.Exit(soon); code != 0 {
		t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
	}
	deleted(t, sup)
}

func TestDrainTimeout(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "1500ms"})
	p.waitHTTP(readyURL, 200, soon)
	p.listen("tcp", "127.0.0.1:8080") // never closed
	start := time.Now()
	hook := p.prestop()
	// A drain that reaches its bound is the design, not a hook failure:
	// exit 0, with the timeout said and counted. (prestop exited 1, and the
	// kubelet recorded FailedPreStopHook.)
	if code := hook.Exit(soon); code != 0 {
		t.Fatalf("prestop exit %d at the drain's bound, want 0:\n%s", code, hook.Out.String())
	}
	if d := time.Since(start); d < time.Second || d > 6*time.Second {
		t.Fatalf("prestop returned after %v with --drain-timeout 1.5s", d)
	}
	if !strings.Contains(hook.Out.String(), "--drain-timeout") {
		t.Fatalf("prestop did not say the bound was reached: %s", hook.Out.String())
	}
	if n, _ := p.metric(`proxy_supervisor_drains_total{end="timeout"}`); n != 1 {
		t.Fatalf(`drains_total{end="timeout"} = %v, want 1`, n)
	}
	deleted(t, sup)
}

// Ports that are not the app's do not hold the drain: Istio's, the health
// port, Envoy's own listeners, and, with an allowlist, another sidecar's.
func TestNotTheAppsPortsDoNotHoldDrain(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		flags  []string
		listen []string
	}{
		{"proxy ports", nil, []string{"127.0.0.1:15090", "[::1]:15020"}},
		{"another sidecar outside --app-ports", []string{"--app-ports", "8080"}, []string{"127.0.0.1:9901"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPod(t)
			sup := p.supervise(append([]string{"--drain-min", "0s"}, tt.flags...),
				"--listener", "outbound=127.0.0.1:9001,tcp")
			p.waitHTTP(readyURL, 200, soon)
			for _, addr := range tt.listen {
				p.listen("tcp", addr)
			}
			start := time.Now()
			if code, out := p.client(soon, nil, "prestop", "--control-dir", p.dir); code != 0 {
				t.Fatalf("prestop exit %d: %s", code, out)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("prestop took %v; nothing of the app's was open", d)
			}
			sup.Signal(syscall.SIGTERM)
			sup.Exit(soon)
		})
	}
}

// SIGTERM alone (no preStop hook) drains too, then stops.
func TestSigtermDrainsFirst(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "20s"})
	p.waitHTTP(readyURL, 200, soon)
	ln := p.listen("tcp", "127.0.0.1:8080")
	sup.Signal(syscall.SIGTERM)
	if sup.Wait(time.Second) {
		t.Fatalf("supervisor exited %d while the app still listened", sup.Code())
	}
	if code, _ := p.get(readyURL); code != 503 {
		t.Fatalf("readiness %d during the drain", code)
	}
	ln.Close()
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// A peer completion during the drain ends its wait at once.
func TestCompletionEndsDrain(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "30s"})
	p.waitHTTP(readyURL, 200, soon)
	p.listen("tcp", "127.0.0.1:8080")
	hook := p.prestop("--timeout", "30s")
	p.stillBlocked(sup, hook, 500*time.Millisecond)
	if code, _ := p.client(soon, nil, "complete", "--control-dir", p.dir); code != 0 {
		t.Fatal("complete failed")
	}
	if code := hook.Exit(soon); code != 0 {
		t.Fatalf("prestop exit %d", code)
	}
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d", code)
	}
}

// sleeps counts how often the threads of pid have slept (their voluntary
// context switches), each a wake to come.
func sleeps(t *testing.T, pid int) float64 {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of %d: %v", pid, err)
	}
	n := 0.0
	for _, task := range tasks {
		tid, _ := strconv.Atoi(filepath.Base(task))
		st, err := procStatusKB(tid, "voluntary_ctxt_switches")
		if err != nil {
			continue // the thread ended meanwhile
		}
		n += st["voluntary_ctxt_switches"]
	}
	return n
}

// A drain waiting on an app that still listens is told of the close by the
// kernel, and scans the ports only every 200 ms meanwhile: the supervisor
// sleeps between, since each wake costs CPU (0.15-0.4 ms on a small VM).
// The test counts how often its threads sleep, which unlike CPU time does
// not grow with the machine's load: polling every 40 ms they slept about
// 250 times a second, told by the kernel about 70.
func TestDrainOnAListeningAppSleeps(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "20s"})
	p.waitHTTP(readyURL, 200, soon)
	ln := p.listen("tcp4", "127.0.0.1:8080")
	hook := p.prestop()
	sup.WaitLog(`msg=draining`, soon)
	before, start := sleeps(t, sup.Pid()), time.Now()
	time.Sleep(2 * time.Second) // the span measured
	rate := (sleeps(t, sup.Pid()) - before) / time.Since(start).Seconds()
	if hook.Wait(0) {
		t.Fatalf("prestop returned (%d) while the app listened:\n%s", hook.Code(), hook.Out.String())
	}
	closed := time.Now()
	ln.Close()
	if code := hook.Exit(soon); code != 0 {
		t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
	}
	if d := time.Since(closed); d > 3*time.Second {
		t.Fatalf("prestop returned %v after the port closed", d)
	}
	if rate > 150 {
		t.Errorf("the draining supervisor's threads slept %.0f times a second, want at most 150", rate)
	}
	t.Logf("%.0f sleeps a second while the drain waited", rate)
}

// A proxy that crashes mid-drain stops the supervisor, with the proxy's
// code: the preStop hook that waited on the drain exits 0 and says the
// supervisor stopped. (It
// said the drain went on after --timeout, a second after the hook began.)
func TestPrestopSeesTheSupervisorStopMidDrain(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	ctl := p.dir + "/envoy.sock"
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "20s"}, "--control", ctl)
	p.waitHTTP(readyURL, 200, soon)
	p.listen("tcp", "127.0.0.1:8080") // holds the drain
	hook := p.prestop("--timeout", "25s")
	p.stillBlocked(sup, hook, 300*time.Millisecond)
	fixture(t, ctl, "crash")
	if code := sup.Exit(soon); code != 139 { // the proxy's death during the drain replaces the preStop's 0
		t.Fatalf("supervisor exit %d, want the crashed proxy's 139", code)
	}
	if code := hook.Exit(soon); code != 0 {
		t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
	}
	out := hook.Out.String()
	if !strings.Contains(out, "the supervisor stopped") || strings.Contains(out, "still draining") {
		t.Fatalf("prestop misreports a supervisor that stopped mid-drain:\n%s", out)
	}
}
