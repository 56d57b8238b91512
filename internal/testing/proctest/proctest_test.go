package proctest

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestExitCodes(t *testing.T) {
	t.Parallel()
	for script, want := range map[string]int{"exit 0": 0, "exit 3": 3, "kill -TERM $$": 143, "kill -KILL $$": 137} {
		pr := Start(t, script, exec.Command("/bin/sh", "-c", script))
		if got := pr.Exit(10 * time.Second); got != want {
			t.Errorf("%s: code %d, want %d", script, got, want)
		}
		if pr.Ended().IsZero() || pr.Code() != want {
			t.Errorf("%s: ended %v, code %d after the exit", script, pr.Ended(), pr.Code())
		}
	}
}

func TestOutputAndSignal(t *testing.T) {
	t.Parallel()
	pr := Start(t, "sh", exec.Command("/bin/sh", "-c", `trap 'echo got term; exit 7' TERM; echo started; while :; do sleep 0.01; done`))
	pr.WaitLog("started", 10*time.Second)
	if pr.Exited() || pr.Code() != -1 || pr.Status() != 0 {
		t.Fatalf("ended early: code %d", pr.Code())
	}
	pr.Signal(syscall.SIGTERM)
	if code := pr.Exit(10 * time.Second); code != 7 {
		t.Fatalf("code %d, want 7", code)
	}
	if !strings.Contains(pr.Out.String(), "got term") {
		t.Fatalf("output %q", pr.Out.String())
	}
}

// Kill takes the whole process group: the cleanup leaves no grandchild.
func TestKillTakesTheGroup(t *testing.T) {
	t.Parallel()
	pr := Start(t, "sh", exec.Command("/bin/sh", "-c", `sleep 100 & echo $!; wait`))
	var child string
	Eventually(t, 10*time.Second, "the grandchild's pid", func() bool {
		child = strings.TrimSpace(pr.Out.String())
		return child != ""
	})
	pr.Kill()
	if pr.Code() != 137 {
		t.Fatalf("code %d, want 137", pr.Code())
	}
	Eventually(t, 10*time.Second, "the grandchild dead", func() bool {
		b, err := os.ReadFile("/proc/" + child + "/stat")
		if err != nil {
			return true // reaped
		}
		s := string(b)
		return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0] == "Z"
	})
}

func TestUntil(t *testing.T) {
	t.Parallel()
	n := 0
	if !Until(10*time.Second, func() bool { n++; return n == 5 }) {
		t.Fatal("Until gave up on a condition that came true")
	}
	start := time.Now()
	if Until(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("Until reported a false condition true")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("Until gave up after %v, before its bound", d)
	}
}

func TestShortDirAndFreePort(t *testing.T) {
	t.Parallel()
	// Room for a socket name in sun_path (108 bytes with the NUL).
	if d := ShortDir(t); len(d) > 40 {
		t.Errorf("ShortDir %q is %d bytes", d, len(d))
	}
	seen := map[uint16]bool{}
	for range 20 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
