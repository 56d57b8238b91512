package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// Generous bounds: these assert behaviour, not speed (docs/benchmarks.md
// has the speed). A bound is only ever waited out when the test fails, so
// it is sized for the busiest machine the suite must pass on: beside
// stress-ng --cpu 2 --io 1 and the suite's own parallel pods (1-minute load
// 33 on 2 cores), a fake Envoy took 7 s from its fork to its first log line,
// and 10 s failed two restart-rule tests.
const (
	soon = 30 * time.Second
)

func TestSigtermAfterReadyExitsZero(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise(nil)
	p.waitHTTP(readyURL, 200, soon)
	sup.Signal(syscall.SIGTERM)
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	out := sup.Out.String()
	for _, want := range []string{"proxy started", "proxy ready", "signal received", "stop requested", "proxy exited"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if strings.Contains(out, "escalated to SIGKILL") {
		t.Error("a proxy that honours /quitquitquit needed SIGKILL")
	}
}

func TestSigtermBeforeReadyExits143(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise(nil, "--stay-initializing")
	sup.WaitLog("proxy started", soon)
	// Up and answering, and still not ready.
	proctest.Eventually(t, soon, "readiness 503 naming INITIALIZING", func() bool {
		code, body := p.get(readyURL)
		return code == 503 && strings.Contains(body, "INITIALIZING")
	})
	sup.Signal(syscall.SIGTERM)
	if code := sup.Exit(soon); code != 143 {
		t.Fatalf("exit %d, want 143", code)
	}
}

func TestSigquitKillsAtOnce(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--stop-timeout", "30s"}, "--hang-on-term")
	p.waitHTTP(readyURL, 200, soon)
	start := time.Now()
	sup.Signal(syscall.SIGQUIT)
	if code := sup.Exit(soon); code != 131 {
		t.Fatalf("exit %d, want 131", code)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("SIGQUIT took %v; it must not wait for the stop timeout", d)
	}
}

func TestProxyExitCodePropagates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		flags []string
		code  int
	}{
		{"exit code", []string{"--exit-after", "300ms", "--exit-code", "3"}, 3},
		{"crash", []string{"--crash-after", "300ms"}, 139},
		{"config error", []string{"--config-error"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPod(t)
			sup := p.supervise(nil, tt.flags...)
			if code := sup.Exit(soon); code != tt.code {
				t.Fatalf("exit %d, want %d", code, tt.code)
			}
			sup.WaitLog("proxy exited", soon)
		})
	}
}

func TestCommandNotFoundOrNotExecutable(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	notExec := p.dir + "/not-executable"
	if err := writeFile(notExec, "#!/bin/sh\n", 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{p.dir + "/missing": 127, notExec: 126} {
		pr := p.start("supervisor", true, nil, bin.supervisor, "supervise", "--control-dir", p.dir, "--health-addr", "", "--", path)
		if code := pr.Exit(soon); code != want {
			t.Errorf("%s: exit %d, want %d", path, code, want)
		}
		if !strings.Contains(pr.Out.String(), path) {
			t.Errorf("%s: the error does not name the path:\n%s", path, pr.Out.String())
		}
	}
}

// A supervisor that cannot be built (here: its records' directory cannot be
// made) exits 1 before forking the proxy, and the termination message says
// why, as it does for every other exit.
func TestUnusableControlDirInTheTerminationMessage(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	msg := p.failsBeforeProxy(func(file string) []string { return []string{"--control-dir", file + "/sub"} })
	if want := "proxy-supervisor: exit 1 (nothing decided); never ready; error: completion records: "; !strings.HasPrefix(msg, want) || !strings.Contains(msg, "not a directory") {
		t.Fatalf("termination message %q, want it to start %q and say why", msg, want)
	}
}

// failsBeforeProxy runs a supervisor whose flags (given a regular file in
// the volume to trip on) make its setup fail, asserts that it exits 1
// without starting the proxy, and returns its termination message.
func (p *pod) failsBeforeProxy(flags func(file string) []string) string {
	p.t.Helper()
	file, msg := p.dir+"/a-file", p.dir+"/termination-log"
	for _, f := range []string{file, msg} {
		if err := writeFile(f, "", 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
	argv := append([]string{bin.supervisor, "supervise", "--control-dir", p.dir}, flags(file)...)
	pr := p.start("supervisor", true, nil, append(argv, "--termination-log", msg, "--health-addr", "", "--", bin.envoy)...)
	if code := pr.Exit(soon); code != 1 {
		p.t.Fatalf("exit %d, want 1:\n%s", code, pr.Out.String())
	}
	if strings.Contains(pr.Out.String(), "proxy started") {
		p.t.Fatalf("the proxy was started:\n%s", pr.Out.String())
	}
	b, err := lastBytes(msg, 4096) // what the kubelet reads
	if err != nil {
		p.t.Fatal(err)
	}
	return string(b)
}

// exec starts COMMAND with a bare fork and exec (not os/exec), and still
// exits the way a shell would when it cannot: 127 for a command that does
// not exist, by path or on PATH, and 126 for one that cannot be executed.
func TestExecCommandNotFoundOrNotExecutable(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	p.supervise([]string{"--restart-policy", "Always"})
	p.waitHTTP(readyURL, 200, 10*time.Second)
	notExec := p.dir + "/not-executable"
	if err := writeFile(notExec, "#!/bin/sh\n", 0o644); err != nil {
		t.Fatal(err)
	}
	i := 0
	for path, want := range map[string]int{p.dir + "/missing": 127, "no-such-command-on-path": 127, notExec: 126} {
		i++
		e := p.start("exec", false, nil, bin.supervisor, "exec", "--name", fmt.Sprintf("app%d", i), "--control-dir", p.dir, "--timeout", "10s", "--", path)
		if code := e.Exit(10 * time.Second); code != want {
			t.Errorf("%s: exit %d, want %d:\n%s", path, code, want, e.Out.String())
		}
		if !strings.Contains(e.Out.String(), path) {
			t.Errorf("%s: the error does not name the command:\n%s", path, e.Out.String())
		}
	}
}

func TestBadFlagsExit2(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	for _, args := range [][]string{
		{"supervise", "--drain-min", "soon", "--", "true"},
		{"supervise", "--no-such-flag", "--", "true"},
		{"supervise"},
		{"supervise", "--on-peer-failure", "maybe", "--", "true"},
	} {
		code, out := p.client(soon, nil, args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if lines := strings.Count(strings.TrimSpace(out), "\n") + 1; lines != 1 {
			t.Errorf("%v: want one line of error, got %d:\n%s", args, lines, out)
		}
	}
	code, out := p.client(soon, []string{"PROXY_SUPERVISOR_STOP_TIMEOUT=later"}, "supervise", "--", "true")
	if code != 2 || !strings.Contains(out, "PROXY_SUPERVISOR_STOP_TIMEOUT") {
		t.Errorf("bad env var: exit %d, output %q; want 2 naming the variable", code, out)
	}
}

// A proxy that ignores SIGTERM and /quitquitquit is killed at --stop-timeout,
// and a stop we asked for still exits 0.
func TestHangingProxyIsKilled(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--stop-timeout", "1s", "--drain-min", "0s"}, "--hang-on-term")
	p.waitHTTP(readyURL, 200, soon)
	start := time.Now()
	sup.Signal(syscall.SIGTERM)
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Fatalf("stop took %v with --stop-timeout 1s", d)
	}
	if !strings.Contains(sup.Out.String(), "escalated to SIGKILL") {
		t.Fatal("no SIGKILL escalation logged")
	}
}

func TestSignalForwarding(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s"}, "--init-delay", "1s")
	sup.WaitLog("proxy started", soon)
	// Before ready, SIGUSR1 would kill Envoy; it must be dropped.
	sup.Signal(syscall.SIGUSR1)
	sup.WaitLog("SIGUSR1 dropped", soon)
	p.waitHTTP(readyURL, 200, soon)
	sup.Signal(syscall.SIGUSR1)
	sup.WaitLog("reopening access logs", soon)
	// Neither is forwarded: SIGUSR2 would kill Envoy, SIGHUP pilot-agent.
	sup.Signal(syscall.SIGUSR2)
	sup.Signal(syscall.SIGHUP)
	sup.WaitLog(`signal not forwarded" signal=SIGUSR2`, soon)
	sup.WaitLog(`signal not forwarded" signal=SIGHUP`, soon)
	p.waitHTTP(readyURL, 200, soon)
	sup.Signal(syscall.SIGTERM)
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("exit %d, want 0 (the proxy must have survived the signals)", code)
	}
}

// A storm of signals that must not stop anything, then one that must.
func TestSignalStorm(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s"})
	p.waitHTTP(readyURL, 200, soon)
	storm := []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR2, syscall.SIGURG, syscall.SIGWINCH, syscall.SIGUSR1}
	for i := 0; i < 300; i++ {
		for _, sig := range storm {
			sup.Cmd.Process.Signal(sig)
		}
	}
	// Signals of one kind coalesce: each kind the supervisor handles is
	// counted at least once (SIGURG and SIGWINCH it leaves to Go, which
	// ignores them).
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR2, syscall.SIGUSR1} {
		series := fmt.Sprintf(`proxy_supervisor_signals_total{signal="%s"}`, unix.SignalName(sig))
		proctest.Eventually(t, soon, series+" counted", func() bool { v, _ := p.metric(series); return v >= 1 })
	}
	p.waitHTTP(readyURL, 200, soon)
	for i := 0; i < 50; i++ {
		sup.Cmd.Process.Signal(syscall.SIGTERM)
	}
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
}

// As PID 1 the supervisor reaps every orphan the proxy leaves, and the
// proxy's own status is never lost among them.
func TestReapsOrphansAsPID1(t *testing.T) {
	t.Parallel()
	// Each orphan is a start of the fake Envoy's binary, which under the
	// race detector costs tens of milliseconds of CPU: fewer there, the
	// full storm in the run against the binaries as shipped.
	orphans := 500
	if proctest.Race {
		orphans = 100
	}
	p := newPod(t)
	ctl := p.dir + "/envoy.sock"
	sup := p.supervise(nil, "--orphans", strconv.Itoa(orphans), "--orphan-life", "200ms", "--control", ctl)
	p.waitHTTP(readyURL, 200, soon)
	var reaped float64
	if !proctest.Until(3*soon, func() bool {
		reaped, _ = p.metric("proxy_supervisor_zombies_reaped_total")
		return reaped >= float64(orphans)
	}) {
		t.Fatalf("reaped %v orphans, want >= %d", reaped, orphans)
	}
	if z := proctest.Zombies(sup.Pid()); len(z) != 0 {
		t.Errorf("%d zombies under the supervisor: %v", len(z), z)
	}
	// The proxy exits only now that every orphan was reaped, however
	// long that took.
	fixture(t, ctl, "exit 7")
	if code := sup.Exit(soon); code != 7 {
		t.Fatalf("exit %d, want the proxy's 7", code)
	}
}
