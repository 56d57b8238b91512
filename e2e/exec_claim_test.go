package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two `exec --name job` started together must never both run their app:
// exactly one of each pair runs, and the other is refused at once.
func TestExecSameNameTogetherRunsOnce(t *testing.T) {
	p := newPod(t)
	sup := p.supervise([]string{"--peers", "job,other"})
	p.waitHTTP(readyURL, 200, 10*time.Second)
	marker := filepath.Join(t.TempDir(), "runs")
	const pairs = 15
	for i := range pairs {
		// The app outlives the other exec's start by far, so a second run
		// can only be a double run, never one after the other.
		app := []string{bin.supervisor, "exec", "--name", "job", "--control-dir", p.dir, "--timeout", "10s", "--",
			"sh", "-c", "echo run >> " + marker + "; sleep 0.3"}
		a := p.start("exec-a", false, nil, app...)
		b := p.start("exec-b", false, nil, app...)
		codes := []int{a.Exit(10 * time.Second), b.Exit(10 * time.Second)}
		b2, _ := os.ReadFile(marker)
		if n := strings.Count(string(b2), "run"); n != i+1 {
			t.Fatalf("pair %d: the app ran %d times in all, want %d (exits %v):\n%s\n%s", i+1, n, i+1, codes, a.Out.String(), b.Out.String())
		}
	}
	select {
	case <-sup.Done():
		t.Fatalf("supervisor exited (%d) though peer other never completed", sup.Code())
	default:
	}
}
