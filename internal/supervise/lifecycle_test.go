package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/proxy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// notEnded is how long a Run that must go on is watched. A completion
// settles at once (no rescan), and /quitquitquit stops the fake Envoy in
// milliseconds, so a wrong end would show well within it.
const notEnded = 250 * time.Millisecond

func TestCompletionEndsRun(t *testing.T) {
	type step struct {
		peer   string
		code   int
		reason string
		ends   bool // Run returns after this step
	}
	tests := []struct {
		name      string
		policy    peers.Policy
		steps     []step
		code      int
		decidedBy string
	}{
		{
			name:   "success",
			policy: peers.Policy{Count: 1},
			steps:  []step{{peer: "app", code: 0, ends: true}},
			code:   0, decidedBy: "every peer succeeded",
		},
		{
			name:   "failure under Never",
			policy: peers.Policy{Count: 1},
			steps:  []step{{peer: "app", code: 3, ends: true}},
			code:   3, decidedBy: "peer app failed with code 3",
		},
		{
			name:   "signaled",
			policy: peers.Policy{Count: 1},
			steps:  []step{{peer: "app", code: 143, reason: "signaled", ends: true}},
			code:   143, decidedBy: "peer app failed with code 143, and no pod deletion followed",
		},
		{
			name:   "not-ready",
			policy: peers.Policy{Count: 1},
			steps:  []step{{peer: "app", code: 69, reason: "not-ready", ends: true}},
			code:   69, decidedBy: "peer app failed with code 69",
		},
		{
			name:   "Wait: failure keeps the proxy, success ends it",
			policy: peers.Policy{Count: 1, Restart: peers.OnFailure},
			steps:  []step{{peer: "app", code: 3}, {peer: "app", code: 7}, {peer: "app", code: 0, ends: true}},
			code:   0, decidedBy: "every peer succeeded",
		},
		{
			name:   "two peers by count",
			policy: peers.Policy{Count: 2},
			steps:  []step{{peer: "a", code: 0}, {peer: "a", code: 0}, {peer: "b", code: 0, ends: true}},
			code:   0, decidedBy: "every peer succeeded",
		},
		{
			name:   "named peers: the first failure ends it",
			policy: peers.Policy{Names: []string{"job", "uploader"}},
			steps:  []step{{peer: "job", code: 0}, {peer: "uploader", code: 5, ends: true}},
			code:   5, decidedBy: "peer uploader failed with code 5",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startSupervisor(t, func(_ *harness, c *Config) { c.Policy, c.DeletionWindow = tt.policy, testWindow })
			h.waitReady()
			for i, st := range tt.steps {
				if st.ends {
					h.complete(st.peer, st.code, st.reason)
				} else {
					h.post(st.peer, st.code, st.reason)
					h.running(notEnded)
					if s := h.status(); s.ExitCode != nil || s.State != "ready" {
						t.Fatalf("after step %d: state %q, exit code %v; want ready and undecided", i, s.State, s.ExitCode)
					}
				}
			}
			if code := h.wait(5 * time.Second); code != tt.code {
				t.Fatalf("Run = %d, want %d", code, tt.code)
			}
			if h.err != nil {
				t.Errorf("Run error: %v", h.err)
			}
			s := h.status()
			if s.State != "exited" || s.ExitCode == nil || *s.ExitCode != tt.code || !strings.HasPrefix(s.DecidedBy, tt.decidedBy) {
				t.Errorf("status after Run: state %q, exit code %v, decided by %q; want exited, %d, %q",
					s.State, s.ExitCode, s.DecidedBy, tt.code, tt.decidedBy)
			}
			// Stopped by /quitquitquit, with neither signal needed: the
			// supervisor logs an escalation, and the fake Envoy a caught
			// SIGTERM. (Evidence, not the time Run took: a loaded machine
			// may take longer than the grace to run the whole stop.)
			if h.logged("escalated to") || h.logged("admin /quitquitquit failed") {
				t.Error("stop escalated beyond /quitquitquit")
			}
			if out := h.envoyOutput(); strings.Contains(out, "SIGTERM") {
				t.Errorf("the fake Envoy got SIGTERM; want /quitquitquit alone:\n%s", out)
			}
		})
	}
}

func TestCompleteRejectsBadInput(t *testing.T) {
	tests := []struct {
		name   string
		policy peers.Policy
		peer   string
		code   int
		reason string
		errHas string
	}{
		{"unlisted peer", peers.Policy{Names: []string{"job"}}, "other", 0, "", `unknown peer "other"`},
		{"invalid name", peers.Policy{Count: 1}, "Bad_Name", 0, "", "peer name"},
		{"dotfile name", peers.Policy{Count: 1}, ".posted", 0, "", "peer name"},
		{"empty name", peers.Policy{Count: 1}, "", 0, "", "empty"},
		{"lost is the supervisor's own reason", peers.Policy{Count: 1}, "app", 137, "lost", "reason"},
		{"unknown reason", peers.Policy{Count: 1}, "app", 1, "crashed", "reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startSupervisor(t, func(_ *harness, c *Config) { c.Policy, c.DeletionWindow = tt.policy, testWindow })
			h.waitReady()
			err := h.s.Complete(context.Background(), control.Completion{Peer: tt.peer, Code: tt.code, Reason: tt.reason})
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("Complete(%q, %d, %q) = %v, want an error with %q", tt.peer, tt.code, tt.reason, err, tt.errHas)
			}
			// Over the socket it is a 400 with the same text. (There an
			// empty peer means the default, "app".)
			if tt.peer != "" {
				err = h.client.Complete(t.Context(), control.Completion{Peer: tt.peer, Code: tt.code, Reason: tt.reason})
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("POST /v1/complete peer=%q: %v, want an error with %q", tt.peer, err, tt.errHas)
				}
			}
			h.running(notEnded / 2)
			if s := h.status(); s.ExitCode != nil || len(s.Peers) != 0 {
				t.Errorf("a refused completion changed the status: exit code %v, peers %v", s.ExitCode, s.Peers)
			}
			ents, _ := os.ReadDir(filepath.Join(h.dir, "peers", ".posted"))
			if len(ents) != 0 {
				t.Errorf("a refused completion was recorded: %v", ents)
			}
		})
	}
}

func TestProxyExitsByItself(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		ready       bool // it becomes ready before it exits
		failOnDeath bool
		code        int
		decidedBy   string
		policy      peers.Policy // the harness's (Count 1, Never) when zero
	}{
		{"exit code 4", []string{"--exit-after", "200ms", "--exit-code", "4"}, true, false, 4, "proxy exited by itself", peers.Policy{}},
		{"exit code 0", []string{"--exit-after", "200ms", "--exit-code", "0"}, true, false, 0, "proxy exited by itself", peers.Policy{}},
		{"crash is 128+SIGSEGV", []string{"--crash-after", "200ms"}, true, false, 139, "proxy exited by itself", peers.Policy{}},
		{"bad config", []string{"--config-error"}, false, false, 1, "proxy exited by itself", peers.Policy{}},
		{"FailOnEnvoyDeath: an unasked exit 0 is 1", []string{"--exit-after", "200ms", "--exit-code", "0"}, true, true, 1, "proxy exited 0 unasked", peers.Policy{}},
		{"FailOnEnvoyDeath: other codes stay", []string{"--exit-after", "200ms", "--exit-code", "4"}, true, true, 4, "proxy exited by itself", peers.Policy{}},
		// Issue 38: the kubelet restarts a classic sidecar under OnFailure
		// only after a non-zero code, and the pending app needs it.
		{"OnFailure, a peer pending: an unasked exit 0 is 1", []string{"--exit-after", "200ms", "--exit-code", "0"}, true, false, 1,
			"proxy exited 0 unasked while a peer is pending under OnFailure", peers.Policy{Count: 1, Restart: peers.OnFailure}},
		{"OnFailure, a peer pending: other codes stay", []string{"--exit-after", "200ms", "--exit-code", "4"}, true, false, 4,
			"proxy exited by itself", peers.Policy{Count: 1, Restart: peers.OnFailure}},
		{"OnFailure, before ready: an exit 0 is 1 too", []string{"--init-delay", "1m", "--exit-after", "200ms", "--exit-code", "0"}, false, false, 1,
			"proxy exited 0 unasked while a peer is pending under OnFailure", peers.Policy{Count: 1, Restart: peers.OnFailure}},
		// A native sidecar is restarted whatever its code; under Always any
		// container is.
		{"OnFailure, a native sidecar: the exit 0 stays", []string{"--exit-after", "200ms", "--exit-code", "0"}, true, false, 0,
			"proxy exited by itself", peers.Policy{Count: 1, Restart: peers.OnFailure, Native: true}},
		{"Always: the exit 0 stays", []string{"--exit-after", "200ms", "--exit-code", "0"}, true, false, 0,
			"proxy exited by itself", peers.Policy{Count: 1, Restart: peers.Always}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startSupervisor(t, func(_ *harness, c *Config) {
				c.FailOnEnvoyDeath = tt.failOnDeath
				if tt.policy.Count > 0 {
					c.Policy = tt.policy
				}
			}, tt.args...)
			if tt.ready {
				h.waitReady()
			}
			if code := h.wait(5 * time.Second); code != tt.code {
				t.Fatalf("Run = %d, want %d", code, tt.code)
			}
			if s := h.status(); !strings.HasPrefix(s.DecidedBy, tt.decidedBy) || s.Ready || s.State != "exited" {
				t.Errorf("status: decided by %q, ready %v, state %q; want %q, not ready, exited", s.DecidedBy, s.Ready, s.State, tt.decidedBy)
			}
			if h.logged("stop requested") {
				t.Error("a stop was requested for a proxy that exited by itself")
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	noExec := filepath.Join(proctest.ShortDir(t), "proxy")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		command []string
		code    int
	}{
		{"not found", []string{"/nonexistent/envoy"}, 127},
		{"not found in PATH", []string{"no-such-proxy-supervisor-test-proxy"}, 127},
		{"not executable", []string{noExec}, 126},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startSupervisor(t, func(_ *harness, c *Config) { c.Command = tt.command })
			if code := h.wait(5 * time.Second); code != tt.code {
				t.Fatalf("Run = %d, want %d", code, tt.code)
			}
			var se *proxy.StartError
			if !errors.As(h.err, &se) || se.Code != tt.code {
				t.Fatalf("Run error = %#v, want a *StartError with code %d", h.err, tt.code)
			}
		})
	}
}

// After a failed start nothing may be left listening on the control
// socket: a client must be refused at once, not left hanging.
func TestStartErrorClosesControlSocket(t *testing.T) {
	h := startSupervisor(t, func(_ *harness, c *Config) { c.Command = []string{"/nonexistent/envoy"} })
	if code := h.wait(5 * time.Second); code != 127 {
		t.Fatalf("Run = %d, want 127", code)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err := h.client.Status(ctx)
	if !control.Unavailable(err) {
		t.Errorf("GET /v1/status after a failed start: %v; want the socket refused or gone", err)
	}
}

func TestNewRefusesEmptyCommand(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New with no command succeeded")
	}
}

// Records written before the supervisor starts: a Job whose app finished
// before the proxy container (re)started ends without a proxy.
func TestRecordsBeforeRun(t *testing.T) {
	tests := []struct {
		name   string
		policy peers.Policy
		recs   []peers.Record
		proxy  bool // the proxy must start
		code   int  // with proxy, after a completion of app with 0
	}{
		{"success", peers.Policy{Count: 1}, []peers.Record{{Name: "app", ExitCode: 0, Reason: peers.Exited}}, false, 0},
		{"failure under Never", peers.Policy{Count: 1}, []peers.Record{{Name: "app", ExitCode: 3, Reason: peers.Exited}}, false, 3},
		{"lost under Never", peers.Policy{Count: 1}, []peers.Record{{Name: "app", ExitCode: 137, Reason: peers.Lost}}, false, 137},
		{
			"two names settle a count of two", peers.Policy{Count: 2},
			[]peers.Record{{Name: "a", ExitCode: 0, Reason: peers.Exited}, {Name: "b", ExitCode: 0, Reason: peers.Exited}}, false, 0,
		},
		{"failure under Wait starts the proxy", peers.Policy{Count: 1, Restart: peers.OnFailure}, []peers.Record{{Name: "app", ExitCode: 3, Reason: peers.Exited}}, true, 0},
		{"one of two starts the proxy", peers.Policy{Count: 2}, []peers.Record{{Name: "a", ExitCode: 0, Reason: peers.Exited}}, true, 0},
		{"an unlisted name starts the proxy", peers.Policy{Names: []string{"app"}}, []peers.Record{{Name: "other", ExitCode: 0, Reason: peers.Exited}}, true, 0},
		{"native sidecar starts the proxy", peers.Policy{Count: 1, Native: true}, []peers.Record{{Name: "app", ExitCode: 0, Reason: peers.Exited}}, true, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := setup(t, func(_ *harness, c *Config) { c.Policy = tt.policy })
			d := peers.Open(h.dir)
			if err := d.Create(); err != nil {
				t.Fatal(err)
			}
			for _, r := range tt.recs {
				if err := d.Write(r); err != nil {
					t.Fatal(err)
				}
			}
			h.start()
			if !tt.proxy {
				if code := h.wait(2 * time.Second); code != tt.code || h.err != nil {
					t.Fatalf("Run = %d, %v; want %d, nil", code, h.err, tt.code)
				}
				if pid := h.status().ProxyPID; pid != 0 {
					t.Errorf("proxy pid %d: the proxy was started", pid)
				}
				if !h.logged("completion records settle the job; not starting the proxy") {
					t.Error("no log of not starting the proxy")
				}
				if _, err := os.Stat(control.SocketPath(h.dir)); err == nil {
					t.Error("control socket created though the proxy was never started")
				}
				return
			}
			h.waitReady()
			if h.status().ProxyPID <= 0 {
				t.Fatal("no proxy pid")
			}
			h.running(notEnded)
			if tt.code < 0 {
				// A native sidecar ends on SIGTERM alone.
				h.signal(syscall.SIGTERM)
				if code := h.wait(5 * time.Second); code != 0 {
					t.Fatalf("Run = %d after SIGTERM, want 0", code)
				}
				return
			}
			name := "app"
			if tt.policy.Count == 2 {
				name = "b"
			}
			h.complete(name, 0, "")
			if code := h.wait(5 * time.Second); code != tt.code {
				t.Fatalf("Run = %d, want %d", code, tt.code)
			}
		})
	}
}

// A completion that came by POST alone is kept on disk, so a restarted
// supervisor in the same control dir ends at once with its code.
func TestPostedCompletionSurvivesRestart(t *testing.T) {
	h := startSupervisor(t, nil)
	h.waitReady()
	h.complete("app", 9, "")
	if code := h.wait(5 * time.Second); code != 9 {
		t.Fatalf("first Run = %d, want 9", code)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "peers", ".posted", "app")); err != nil {
		t.Fatalf("posted completion not on disk: %v", err)
	}

	again := setup(t, func(_ *harness, c *Config) { c.ControlDir = h.dir })
	again.start()
	if code := again.wait(2 * time.Second); code != 9 {
		t.Fatalf("restarted Run = %d, want 9", code)
	}
	if again.status().ProxyPID != 0 {
		t.Error("the restarted supervisor started the proxy")
	}
}

// slowRescan leaves a minute between rescans, so that only a fast path
// (a poke, a released lock) can end a test in time.
func slowRescan(_ *harness, c *Config) { c.Intervals.Rescan = time.Minute }

// An exec that marked its record running and then died without a final
// record (killed with its app) fails its peer as lost, with 137, as soon as
// its lock is released.
func TestLostPeer(t *testing.T) {
	h := setup(t, slowRescan)
	holder := holdPeer(h)
	h.start()
	h.waitReady()
	h.running(notEnded)
	if p, ok := h.status().Peers["app"]; !ok || !p.Running {
		t.Fatalf("peer app: %+v, want running", p)
	}
	killed := time.Now()
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := h.wait(5 * time.Second); code != peers.LostCode {
		t.Fatalf("Run = %d, want %d", code, peers.LostCode)
	}
	// The released lock is the fast path; the rescan is a minute away.
	if took := time.Since(killed); took > 5*time.Second {
		t.Errorf("the lost peer ended Run after %v", took)
	}
	p := h.status().Peers["app"]
	if p.Reason != string(peers.Lost) || p.ExitCode == nil || *p.ExitCode != peers.LostCode {
		t.Errorf("peer app: reason %q, code %v; want lost, %d", p.Reason, p.ExitCode, peers.LostCode)
	}
}

// An exec-style run: the peer marks its record running before the
// supervisor starts, the proxy runs, the peer finishes.
func TestRunningRecordThenFinish(t *testing.T) {
	h := setup(t, slowRescan)
	d := peers.Open(h.dir)
	if err := d.Create(); err != nil {
		t.Fatal(err)
	}
	// A final record of an earlier run, replaced by this run's Begin.
	if err := d.Write(peers.Record{Name: "app", ExitCode: 0, Reason: peers.Exited}); err != nil {
		t.Fatal(err)
	}
	r, err := d.Begin("app")
	if err != nil {
		t.Fatal(err)
	}
	h.start()
	h.waitReady()
	h.running(notEnded)
	if p := h.status().Peers["app"]; !p.Running {
		t.Fatalf("peer app: %+v, want running (the earlier run's record replaced)", p)
	}
	finished := time.Now()
	if err := r.Finish(6, peers.Exited, peers.Stop{}); err != nil {
		t.Fatal(err)
	}
	// No poke: the released lock alone makes the supervisor read the
	// final record, well before its rescan.
	if code := h.wait(5 * time.Second); code != 6 {
		t.Fatalf("Run = %d, want 6", code)
	}
	if took := time.Since(finished); took > 5*time.Second {
		t.Errorf("Run ended %v after the record was final", took)
	}
	// The peer's own record said it; nothing is posted.
	if _, err := os.Stat(filepath.Join(h.dir, "peers", ".posted", "app")); err == nil {
		t.Error("a completion already on disk was posted again")
	}
}

// A pilot-agent-like child exits 0 after the Envoy under it died: the code
// is the child's, and Envoy's death is logged with the exit, whether the
// tracker saw the admin port refuse first or not (pilot-agent exits within
// milliseconds, well inside the tracker's poll of a ready proxy). (With
// FailOnEnvoyDeath an unasked 0 is 1: TestProxyExitsByItself.)
func TestEnvoyDeathUnderTheChild(t *testing.T) {
	for _, tt := range []struct {
		name      string
		outlives  string        // how long the child outlives its Envoy
		poll      time.Duration // the tracker's poll of a ready proxy
		trackerAt bool          // the tracker sees the death first
	}{
		{"after the tracker's poll", "0.5", 100 * time.Millisecond, true},
		{"within the tracker's poll", "0.02", time.Minute, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := setup(t, func(h *harness, c *Config) {
				ready := filepath.Join(proctest.ShortDir(t), "ready")
				script := fmt.Sprintf(`"$0" --admin-addr 127.0.0.1:%d --ready-file %s >/dev/null 2>&1 &
p=$!
exec 2>/dev/null
while [ ! -e %s ]; do sleep 0.02; done
sleep 0.2
kill -KILL $p
wait $p
sleep %s
exit 0`, h.adminPort, ready, ready, tt.outlives)
				c.Command = []string{"/bin/sh", "-c", script, envoyBin}
				c.Intervals.TrackerReady = tt.poll
			})
			h.start()
			h.waitReady()
			if code := h.wait(5 * time.Second); code != 0 {
				t.Fatalf("Run = %d, want the child's 0", code)
			}
			if !h.logged("proxy exited", "envoy_died_at", "") {
				t.Error("Envoy's death under the child was not logged with its exit")
			}
			if tt.trackerAt && !h.logged("proxy not ready") {
				t.Error("Envoy's death was not logged when the tracker saw it")
			}
		})
	}
}

// An Envoy that outlives its exiting child is killed with the group; that
// is not its death.
func TestEnvoyAliveAtTheChildsExit(t *testing.T) {
	h := setup(t, func(h *harness, c *Config) {
		ready := filepath.Join(proctest.ShortDir(t), "ready")
		script := fmt.Sprintf(`"$0" --admin-addr 127.0.0.1:%d --ready-file %s >/dev/null 2>&1 &
exec 2>/dev/null
while [ ! -e %s ]; do sleep 0.02; done
sleep 0.2
exit 0`, h.adminPort, ready, ready)
		c.Command = []string{"/bin/sh", "-c", script, envoyBin}
	})
	h.start()
	h.waitReady()
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want the child's 0", code)
	}
	if h.logged("proxy exited", "envoy_died_at", "") {
		t.Error("an Envoy alive at the child's exit was logged as dead")
	}
}

// A completion that came by POST alone counts for this run even when it
// cannot be kept on disk (records.go: "The report still counts for this
// run; it just would not survive a restart"; createPosted: "such
// completions still count for this run but are not kept").
func TestPostedCompletionCountsWhenNotKept(t *testing.T) {
	tests := []struct {
		name   string
		plant  bool // something planted at peers/.posted: the store is unusable
		code   int
		reason string
		want   int
	}{
		{"the store is unusable", true, 0, "", 0},
		{"the store is unusable, failure", true, 4, "", 4},
		// A record cannot say signaled with a code below 129, so it is
		// not kept; the POST must then be refused, or count.
		{"a report no record can hold", false, 0, "signaled", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Planted before New, which makes the store.
			h := setup(t, func(h *harness, _ *Config) {
				if !tt.plant {
					return
				}
				d := peers.Open(h.dir)
				if err := d.Create(); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(proctest.ShortDir(t), filepath.Join(d.Path(), ".posted")); err != nil {
					t.Fatal(err)
				}
			})
			h.start()
			h.waitReady()
			if err := h.s.Complete(context.Background(), control.Completion{Peer: "app", Code: tt.code, Reason: tt.reason}); err != nil {
				if !tt.plant {
					return // refused: fine
				}
				t.Fatalf("POST /v1/complete: %v", err)
			}
			if code := h.wait(3 * time.Second); code != tt.want {
				t.Fatalf("Run = %d, want %d", code, tt.want)
			}
		})
	}
}

// The answer to the request that ends the run (the last completion, or the
// preStop's drain when the peers complete during it) must reach the client:
// a curl in the app's script sees a dropped connection as a failure.
func TestFinalAnswersAreDelivered(t *testing.T) {
	for i := range 20 {
		h := startSupervisor(t, nil)
		h.waitReady()
		err := h.client.Complete(t.Context(), control.Completion{Peer: "app", Code: 0})
		if code := h.wait(5 * time.Second); code != 0 {
			t.Fatalf("run %d: Run = %d, want 0", i, code)
		}
		if err != nil {
			t.Fatalf("run %d: POST /v1/complete that ended the job: %v; want 202", i, err)
		}
	}
}
