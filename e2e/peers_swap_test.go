package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// swapPeers is what uid 1002 can do where the control dir is an emptyDir
// that the supervisor (uid 1337) cannot make sticky: rename peers/ away and
// make its own in its place, writable by all.
func swapPeers(t *testing.T, dir string) {
	t.Helper()
	err := asUID(1002, func() error {
		peers := filepath.Join(dir, "peers")
		if err := os.Rename(peers, filepath.Join(dir, ".peers-away")); err != nil {
			return err
		}
		if err := os.Mkdir(peers, 0o777); err != nil {
			return err
		}
		return os.Chmod(peers, 0o777)
	})
	if err != nil {
		t.Fatalf("uid 1002 could not swap peers/ in a 0777 control dir: %v", err)
	}
}

// Issue 26, 2.3: Istio's layout (a root-owned 0777 control dir, the
// supervisor uid 1337, --allowed-uids), and uid 1002 swaps peers/ while
// the app runs under exec. The supervisor read peers/ by path after its
// start-up check: the running app vanished from the status, the preStop
// drain ended after its quiet period and the proxy was stopped while the
// app still ran. The supervisor keeps the peers/ it created and checked:
// the app is still seen running, the swap is an error shown in the status
// and the drain, and the drain waits for its bound, never taking the swap
// for "no peer runs".
func TestSwappedPeersDirHidesNoRunningApp(t *testing.T) {
	p, sup := istioPod(t, []string{"--allowed-uids", "0,1000,1337", "--drain-min", "0s", "--drain-timeout", "4s"})
	p.waitHTTP(readyURL, 200, soon)

	release := filepath.Join(p.dir, "release")
	app := p.start("app", false, nil, setpriv(1000, bin.supervisor, "exec", "--name", "app", "--control-dir", p.dir, "--",
		"sh", "-c", "while [ ! -e "+release+" ]; do sleep 0.02; done; exit 0")...)
	waitRecord(t, p.dir, "app", `"running":true`)
	proctest.Eventually(t, soon, "the supervisor sees the app running", func() bool {
		st := status(t, p.dir)
		return st.Peers["app"].Running
	})

	swapPeers(t, p.dir)
	var st supervisorStatus
	proctest.Eventually(t, soon, "the status shows the swap", func() bool {
		st = status(t, p.dir)
		return strings.Contains(st.RecordsError, "replaced")
	})
	if !st.Peers["app"].Running {
		t.Errorf("the running app vanished from the status after the swap: %+v", st)
	}

	hook := p.start("prestop", false, nil, setpriv(1337, bin.supervisor, "prestop", "--control-dir", p.dir, "--timeout", "25s")...)
	p.stillBlocked(sup, hook, time.Second) // the quiet period is 300 ms
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := app.Exit(soon); code != 0 {
		t.Fatalf("app exit %d:\n%s", code, app.Out.String())
	}
	// The app's end is known, but what runs in the other peers/ is not: the
	// drain waits for its bound.
	if code := hook.Exit(soon); code != 0 || !strings.Contains(hook.Out.String(), "bound") || !strings.Contains(hook.Out.String(), "replaced") {
		t.Errorf("prestop exit %d, %q; want 0 at the drain's bound, saying why", code, hook.Out.String())
	}
	if out := sup.Out.String(); !strings.Contains(out, "peers_err=") {
		t.Errorf("the drain never said why it waited:\n%s", out)
	}
	// The app succeeded, and was the only peer: the supervisor stops at the
	// drain's end by itself, the moment the hook returns (no SIGTERM is
	// needed, nor may one find it still running).
	if code := sup.Exit(soon); code != 0 {
		t.Errorf("supervisor exit %d, want 0 (the preStop decided)", code)
	}
	if out := sup.Out.String(); !strings.Contains(out, `reason="every peer succeeded"`) {
		t.Errorf("the supervisor did not stop for the app's success:\n%s", out)
	}
}

// The client side of the same swap: exec writes its records in the peers/
// it opened and checked (owned by the supervisor's uid), not in whatever
// the path names by then. A run that began before the swap ends with its
// final record in the supervisor's directory; an exec that starts after it
// refuses uid 1002's directory, says so, runs its COMMAND and reports over
// the socket. (Both once wrote into uid 1002's directory, where no
// supervisor reads, and the first run's released lock read as lost.)
// Both peers' success fixes 0 at once, but while peers/ is replaced
// whether a peer runs under exec is unknown, so the stop waits for the
// drain's bound, as a drain does (issue 38).
func TestExecWritesOnlyInTheSupervisorsPeersDir(t *testing.T) {
	p, sup := istioPod(t, []string{"--allowed-uids", "0,1000,1337", "--peers", "job,late", "--drain-timeout", "2s"})
	p.waitHTTP(readyURL, 200, soon)

	release := filepath.Join(p.dir, "release")
	job := p.start("job", false, nil, setpriv(1000, bin.supervisor, "exec", "--name", "job", "--control-dir", p.dir, "--",
		"sh", "-c", "while [ ! -e "+release+" ]; do sleep 0.02; done; exit 0")...)
	waitRecord(t, p.dir, "job", `"running":true`)
	swapPeers(t, p.dir)

	late := p.start("late", false, nil, setpriv(1000, bin.supervisor, "exec", "--name", "late", "--control-dir", p.dir, "--timeout", "10s", "--", "true")...)
	if code := late.Exit(soon); code != 0 {
		t.Fatalf("late exec exit %d:\n%s", code, late.Out.String())
	}
	if out := late.Out.String(); !strings.Contains(out, "uid 1002") {
		t.Errorf("the late exec did not say whose peers/ it refused:\n%s", out)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := job.Exit(soon); code != 0 {
		t.Fatalf("job exit %d:\n%s", code, job.Out.String())
	}
	if code := sup.Exit(soon); code != 0 {
		t.Errorf("supervisor exit %d, want 0: both peers succeeded", code)
	}
	if out := sup.Out.String(); !strings.Contains(out, "end=timeout") || !strings.Contains(out, "peers_err=") {
		t.Errorf("the stop did not wait for the drain's bound, saying why:\n%s", out)
	}
	ents, err := os.ReadDir(filepath.Join(p.dir, "peers"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("exec wrote %s into uid 1002's peers/", e.Name())
	}
	b, err := os.ReadFile(filepath.Join(p.dir, ".peers-away", "job"))
	if err != nil || !strings.Contains(string(b), `"exit_code":0`) || strings.Contains(string(b), "running") {
		t.Errorf("job's final record in the supervisor's peers/: %q, %v", b, err)
	}
}
