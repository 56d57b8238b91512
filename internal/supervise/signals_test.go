package supervise

import (
	"github.com/proxy-supervisor/proxy-supervisor/internal/clock/clocktest"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Signals are handed to the supervisor's signal actor through its channel,
// as signal.Notify would; none is sent to the test process.
func TestSignals(t *testing.T) {
	tests := []struct {
		name      string
		args      []string // for the fake Envoy
		ready     bool     // wait for ready before the signal
		sig       syscall.Signal
		code      int
		decidedBy string
		log       []string // a message and attributes, as in logged
		killed    bool     // the proxy died of SIGKILL
	}{
		{
			name: "SIGTERM before ready is 143", args: []string{"--stay-initializing"},
			sig: syscall.SIGTERM, code: 143, decidedBy: "SIGTERM", log: []string{"stop requested", "reason", "SIGTERM before the proxy was ever ready"},
		},
		{
			name: "SIGINT before ready is 130", args: []string{"--stay-initializing"},
			sig: syscall.SIGINT, code: 130, decidedBy: "SIGINT",
		},
		{
			name: "SIGTERM after ready drains, then stops with 0", ready: true,
			sig: syscall.SIGTERM, code: 0, decidedBy: "SIGTERM", log: []string{"drain started", "trigger", "SIGTERM"},
		},
		{
			name: "SIGQUIT kills the group at once", ready: true,
			sig: syscall.SIGQUIT, code: 131, decidedBy: "SIGQUIT", log: []string{"killing the proxy's group at once"}, killed: true,
		},
		{
			name: "SIGQUIT before ready", args: []string{"--stay-initializing"},
			sig: syscall.SIGQUIT, code: 131, decidedBy: "SIGQUIT", killed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startSupervisor(t, nil, tt.args...)
			if tt.ready {
				h.waitReady()
			} else {
				h.eventually("the proxy started", func() bool { return h.logged("proxy started") })
			}
			h.signal(tt.sig)
			if code := h.wait(5 * time.Second); code != tt.code {
				t.Fatalf("Run = %d, want %d", code, tt.code)
			}
			if s := h.status(); s.DecidedBy != tt.decidedBy {
				t.Errorf("decided by %q, want %q", s.DecidedBy, tt.decidedBy)
			}
			if tt.log != nil && !h.logged(tt.log[0], tt.log[1:]...) {
				t.Errorf("no log %q", tt.log)
			}
			if got := h.logged("proxy exited", "status", "killed by SIGKILL"); got != tt.killed {
				t.Errorf("proxy killed by SIGKILL: %v, want %v", got, tt.killed)
			}
		})
	}
}

// Signals the proxy must survive: SIGUSR1 before Envoy's handlers are
// installed, and SIGHUP and SIGUSR2 at any time, are not forwarded.
// SIGUSR1 once ready is, and Envoy reopens its logs.
func TestSignalsNotForwarded(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		ready    bool
		sig      syscall.Signal
		log      []string
		envoyHas string
	}{
		{"SIGUSR1 before ready is dropped", []string{"--stay-initializing"}, false, syscall.SIGUSR1, []string{"SIGUSR1 dropped"}, ""},
		{"SIGUSR1 once ready is forwarded", nil, true, syscall.SIGUSR1, []string{"SIGUSR1 forwarded"}, "caught SIGUSR1. Reopening access logs."},
		{"SIGHUP is not forwarded", nil, true, syscall.SIGHUP, []string{"signal not forwarded", "signal", "SIGHUP"}, ""},
		{"SIGUSR2 is not forwarded", nil, true, syscall.SIGUSR2, []string{"signal not forwarded", "signal", "SIGUSR2"}, ""},
		{"SIGHUP before ready is not forwarded", []string{"--stay-initializing"}, false, syscall.SIGHUP, []string{"signal not forwarded", "signal", "SIGHUP"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startSupervisor(t, nil, tt.args...)
			if tt.ready {
				h.waitReady()
			} else {
				h.eventually("the fake Envoy answers", func() bool {
					st, _ := h.s.tracker.Status()
					return strings.Contains(st.Reason, "INITIALIZING")
				})
			}
			h.signal(tt.sig)
			h.eventually("the signal was handled", func() bool { return h.logged(tt.log[0], tt.log[1:]...) })
			if tt.envoyHas != "" {
				h.eventually("the fake Envoy logged it", func() bool { return strings.Contains(h.envoyOutput(), tt.envoyHas) })
			}
			// A signal that reached the fake Envoy by mistake kills it.
			h.running(notEnded)
			if s := h.status(); s.ExitCode != nil || s.State == "exited" {
				t.Fatalf("state %q, exit code %v after %v", s.State, s.ExitCode, tt.sig)
			}
			h.complete("app", 0, "")
			if code := h.wait(5 * time.Second); code != 0 {
				t.Fatalf("Run = %d after the completion, want 0", code)
			}
		})
	}
}

// A second SIGTERM changes nothing, and the code of the first decisive event
// stays.
func TestRepeatedSignalsKeepTheFirstCode(t *testing.T) {
	h := startSupervisor(t, nil, "--stay-initializing")
	h.eventually("the proxy started", func() bool { return h.logged("proxy started") })
	h.signal(syscall.SIGTERM)
	h.signal(syscall.SIGTERM)
	h.signal(syscall.SIGINT)
	if code := h.wait(5 * time.Second); code != 143 {
		t.Fatalf("Run = %d, want 143", code)
	}
	if n := h.countLogged("signal received"); n != 3 {
		t.Errorf("%d signals logged, want 3", n)
	}
	if n := h.countLogged("stop requested"); n != 1 {
		t.Errorf("%d stops requested, want 1", n)
	}
}

// A proxy that hangs on shutdown is escalated to SIGTERM once the quit
// grace has passed and to SIGKILL at the stop timeout, each counted from
// the stop request on the supervisor's clock; the code stays the
// completion's.
func TestStopEscalation(t *testing.T) {
	const grace, timeout = 4 * time.Second, 9 * time.Second
	tests := []struct {
		name string
		code int
	}{
		{"success stays 0 though the proxy needs SIGKILL", 0},
		{"failure keeps its code", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New()
			h := startSupervisor(t, onFakeClock(clk, func(_ *harness, c *Config) {
				c.QuitGrace, c.StopTimeout = grace, timeout
			}), "--hang-on-term")
			h.waitReady()
			began := clk.Now()
			h.complete("app", tt.code, "") // the job is done: the proxy stops at once
			h.eventually("the stop", func() bool { return h.logged("stop requested") })
			expectArmed(t, clk, "SIGTERM", began, grace)
			h.eventually("SIGTERM", func() bool { return h.logged("escalated to SIGTERM") })
			// Seen before the SIGKILL, which would cut the fake Envoy's line.
			h.eventually("the fake Envoy's SIGTERM", func() bool { return strings.Contains(h.envoyOutput(), "caught ENVOY_SIGTERM") })
			if h.logged("escalated to SIGKILL") {
				t.Fatal("SIGKILL before the stop timeout")
			}
			expectArmed(t, clk, "SIGKILL", began, timeout)
			if code := h.wait(5 * time.Second); code != tt.code {
				t.Fatalf("Run = %d, want %d", code, tt.code)
			}
			for _, want := range [][]string{{"escalated to SIGKILL"}, {"proxy exited", "status", "killed by SIGKILL"}} {
				if !h.logged(want[0], want[1:]...) {
					t.Errorf("no log %q", want)
				}
			}
		})
	}
}
