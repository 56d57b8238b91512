package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// Another uid in the pod can take an app's name before the app's exec
// does: create and hold peers/.claim.<name>, or plant and hold peers/<name>.
// exec then once exited 69 without running its app and without a record or
// a POST, and the Job hung. Now it says so in one line, runs its app, and
// its completion reaches the supervisor: on disk when it can write the
// record, over the socket when the squatter's record is in the way (the
// supervisor counts the squatter's files not, its uid being outside
// --allowed-uids).
func TestExecSurvivesANameTakenByAnotherUID(t *testing.T) {
	for _, tc := range []struct {
		name  string
		squat string // what uid 1000 creates and holds locked, in peers/
	}{
		{"claim", ".claim.job"},
		{"record", "job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPod(t)
			emptyDir(t, p)
			sup := p.supervise([]string{"--peers", "job", "--allowed-uids", "0,1001"})
			p.waitHTTP(readyURL, 200, soon)
			squat := filepath.Join(p.dir, "peers", tc.squat)
			held := filepath.Join(p.dir, "held")
			script := `printf '{"name":"job","running":true,"exit_code":0,"time":"2026-11-22T00:00:00Z"}\n' > "$0" && chmod 0644 "$0" && exec flock -x "$0" sh -c ': > "$1"; sleep 60' sh "$1"`
			squatter := p.start("squatter", false, nil, setpriv(1000, "sh", "-c", script, squat, held)...)
			if !proctest.Until(soon, func() bool { _, err := os.Stat(held); return err == nil || squatter.Exited() }) || squatter.Exited() {
				t.Fatalf("the squatter did not take %s:\n%s", squat, squatter.Out.String())
			}

			app := p.start("app", false, nil, setpriv(1001,
				bin.supervisor, "exec", "--name", "job", "--control-dir", p.dir, "--timeout", "10s", "--", "sh", "-c", "exit 3")...)
			if code := app.Exit(soon); code != 3 {
				t.Fatalf("exec exit %d, want the app's 3:\n%s", code, app.Out.String())
			}
			if out := strings.TrimSpace(app.Out.String()); !strings.Contains(out, "uid 1000") {
				t.Fatalf("exec did not say which uid took the name:\n%s", out)
			}
			if code := sup.Exit(soon); code != 3 {
				t.Fatalf("supervisor exit %d, want the app's 3", code)
			}
		})
	}
}
