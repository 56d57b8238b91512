package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 38: the stop that a verdict decides waits for a peer still running
// under exec, and under OnFailure a proxy that exits 0 by itself while a
// peer is pending never gives 0.

// Issue 38, 1: under Never with two peers, job failed and the supervisor
// stopped the proxy 40 ms later, while uploader still ran under exec and
// sent through it: 12 to 13 of its 16 requests were refused. A success
// under --peers 1 while a second exec peer ran did the same. The verdict's
// code is fixed at once (the status says it while the proxy still runs),
// and the proxy stops once no peer runs under exec, as a drain ends once
// the peers are settled, within the drain's bound.
func TestVerdictWaitsForARunningPeer(t *testing.T) {
	for _, tt := range []struct {
		name   string
		peers  string
		script string // job's
		code   int
		why    string
		bound  bool // the uploader never ends: the drain's bound stops the proxy
	}{
		{"another peer's failure under Never", "job,uploader", "exit 3", 3, "peer job failed with code 3", false},
		{"a success under --peers 1", "1", "exit 0", 0, "every peer succeeded", false},
		{"within the drain's bound", "job,uploader", "exit 3", 3, "peer job failed with code 3", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPod(t)
			term := p.dir + "/termination-log"
			if err := writeFile(term, "", 0o644); err != nil {
				t.Fatal(err)
			}
			timeout := "20s"
			if tt.bound {
				timeout = "2s"
			}
			sup := p.supervise([]string{"--restart-policy", "Never", "--peers", tt.peers, "--drain-min", "5s",
				"--drain-timeout", timeout, "--termination-log", term}, "--listener", outbound)
			release := filepath.Join(p.dir, "release")
			uploader := p.app("uploader", nil, fmt.Sprintf("until [ -e %s ]; do sleep 0.02; done; exit 0", release))
			waitRecord(t, p.dir, "uploader", `"running":true`)
			p.waitHTTP(readyURL, 200, soon)
			up := p.upload(time.Second)
			p.envoyStat("http.outbound.downstream_rq_active", 1) // under way when job ends

			// Before job starts: the supervisor acts on job's record, which
			// exec writes just before it exits, so the exit seen here may
			// come after the drain's start.
			decided := time.Now()
			if code := p.app("job", nil, tt.script).Exit(soon); code != tt.code {
				t.Fatalf("job exit %d, want %d", code, tt.code)
			}
			if u := <-up; u.err != nil || u.code != 200 {
				t.Fatalf("uploader's request in flight when job ended: %d, %v; want 200 (the proxy was stopped under it)", u.code, u.err)
			}
			if tt.bound {
				if code := sup.Exit(soon); code != tt.code {
					t.Fatalf("supervisor exit %d, want job's %d", code, tt.code)
				}
				if d := sup.Ended().Sub(decided); d < 1500*time.Millisecond {
					t.Fatalf("the proxy stopped %v after job's end, before the drain's 2 s bound, while uploader ran", d)
				}
				sup.WaitLog("end=timeout", soon)
				terminationMessage(t, term, fmt.Sprintf("exit %d (%s)", tt.code, tt.why))
				return
			}
			// The uploader goes on sending: each of its requests is carried.
			for i := range 8 {
				if u := <-p.upload(100 * time.Millisecond); u.err != nil || u.code != 200 {
					t.Fatalf("uploader's request %d after job's end: %d, %v; want 200", i+1, u.code, u.err)
				}
			}
			// The code was fixed by job's end, at once.
			if st := status(t, p.dir); st.ExitCode == nil || *st.ExitCode != tt.code {
				t.Fatalf("exit code %v while uploader runs, want %d fixed by job's end", st.ExitCode, tt.code)
			}
			if sup.Wait(0) {
				t.Fatalf("supervisor exited %d while uploader ran", sup.Code())
			}
			released := time.Now()
			if err := writeFile(release, "", 0o644); err != nil {
				t.Fatal(err)
			}
			if code := uploader.Exit(soon); code != 0 {
				t.Fatalf("uploader exit %d", code)
			}
			if code := sup.Exit(soon); code != tt.code {
				t.Fatalf("supervisor exit %d, want %d (%s): uploader's later end changes nothing", code, tt.code, tt.why)
			}
			// Not against uploader's exit as seen here: exec writes its
			// record, which the supervisor acts on, just before it exits
			// itself, so the two exits come in either order.
			if sup.Ended().Before(released) {
				t.Fatal("the supervisor exited before uploader could end")
			}
			// Once uploader ended, at once: not after --drain-min.
			if d := sup.Ended().Sub(uploader.Ended()); d > 3*time.Second {
				t.Errorf("the supervisor exited %v after uploader; want at once", d)
			}
			sup.WaitLog("end=peers-completed", soon)
			terminationMessage(t, term, fmt.Sprintf("exit %d (%s)", tt.code, tt.why))
		})
	}
}

// Issue 38, 2: pilot-agent exits 0 when Envoy crashes, and under OnFailure
// the kubelet does not restart a classic sidecar that exited 0, so the
// supervisor's 0 left the Job's app without a proxy until its backoff limit
// or deadline. While a peer is pending under OnFailure (running, or failed
// and awaiting its restart) an exit 0 that nobody asked for is 1, without
// --fail-on-envoy-death. A native sidecar is restarted whatever its code:
// its exit keeps the proxy's code, as under Never.
func TestUnaskedExitZeroUnderOnFailure(t *testing.T) {
	for _, tt := range []struct {
		name  string
		flags []string
		first string // the app's first run: "" runs it until the end of the test
		code  int
		why   string
	}{
		{"OnFailure, the app running", []string{"--restart-policy", "OnFailure"}, "", 1, "proxy exited 0 unasked while a peer is pending under OnFailure"},
		{"OnFailure, the app failed once", []string{"--restart-policy", "OnFailure"}, "exit 3", 1, "proxy exited 0 unasked while a peer is pending under OnFailure"},
		{"OnFailure, a native sidecar", []string{"--restart-policy", "OnFailure", "--native-sidecar"}, "", 0, "proxy exited by itself"},
		{"Never", []string{"--restart-policy", "Never"}, "", 0, "proxy exited by itself"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPod(t)
			ctl, term := p.dir+"/envoy.sock", p.dir+"/termination-log"
			if err := writeFile(term, "", 0o644); err != nil {
				t.Fatal(err)
			}
			sup := p.supervise(append(tt.flags, "--termination-log", term), "--control", ctl)
			p.waitHTTP(readyURL, 200, soon)
			if tt.first == "" {
				p.app("app", nil, "exec sleep 60")
				waitRecord(t, p.dir, "app", `"running":true`)
			} else {
				if code := p.app("app", nil, tt.first).Exit(soon); code != 3 {
					t.Fatalf("app exit %d, want 3", code)
				}
				sup.WaitLog("keeping the proxy for its restart", soon)
			}
			fixture(t, ctl, "exit 0") // pilot-agent's exit once Envoy has crashed
			if code := sup.Exit(soon); code != tt.code {
				t.Fatalf("supervisor exit %d, want %d (%s)", code, tt.code, tt.why)
			}
			terminationMessage(t, term, fmt.Sprintf("exit %d (%s", tt.code, tt.why))
			if strings.Contains(sup.Out.String(), "stop requested") {
				t.Error("a stop was requested for a proxy that exited by itself")
			}
		})
	}
}
