package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
)

// A client may complete only a peer whose record it owns: the sticky
// records directory stops uid 1000 from replacing uid 1001's record on
// disk, and the supervisor holds the caller's uid (SO_PEERCRED) against the
// record's owner over the socket too. (uid 1000's POST for 1001's job once
// got 202, and the supervisor exited 0 while the job still ran.)
func TestOnlyThePeersOwnerMayCompleteIt(t *testing.T) {
	p := newPod(t)
	emptyDir(t, p)
	sup := p.supervise([]string{"--peers", "job", "--allowed-uids", "0,1000,1001"})
	p.waitHTTP(readyURL, 200, soon)

	release := filepath.Join(p.dir, "release")
	as := func(uid int, args ...string) []string {
		return setpriv(uid, append([]string{bin.supervisor}, args...)...)
	}
	job := p.start("job", false, nil, as(1001, "exec", "--name", "job", "--control-dir", p.dir, "--",
		"/bin/sh", "-c", "while [ ! -e "+release+" ]; do sleep 0.02; done; exit 3")...)
	waitRecord(t, p.dir, "job", `"running":true`)

	// On disk, the sticky bit refuses uid 1000's record.
	forger := p.start("forger", false, nil, as(1000, "complete", "--name", "job", "--exit-code", "0", "--timeout", "5s", "--control-dir", p.dir)...)
	if code := forger.Exit(soon); code == 0 {
		t.Fatalf("uid 1000 completed uid 1001's job: %s", forger.Out.String())
	}
	// Over the socket, the supervisor refuses it.
	curl := p.start("curl", false, nil, setpriv(1000,
		"curl", "-sS", "-w", "\n%{http_code}", "--unix-socket", control.SocketPath(p.dir),
		"-X", "POST", "http://x/v1/complete?peer=job&exit_code=0")...)
	curl.Exit(soon)
	if out := curl.Out.String(); !strings.HasSuffix(strings.TrimSpace(out), "403") || !strings.Contains(out, "uid 1001") {
		t.Fatalf("uid 1000's POST for uid 1001's job: %s; want 403 naming the owner", out)
	}
	if sup.Wait(300 * time.Millisecond) {
		t.Fatalf("the supervisor exited %d on a forged completion", sup.Code())
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := job.Exit(soon); code != 3 {
		t.Fatalf("job exit %d, want 3", code)
	}
	if code := sup.Exit(soon); code != 3 {
		t.Fatalf("supervisor exit %d, want the job's 3", code)
	}
}
