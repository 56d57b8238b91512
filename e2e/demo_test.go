package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// TestDemo runs README's first command's script, scripts/demo.sh, in a
// network namespace of its own (its loopback ports are fixed) and reads its
// output as a newcomer would: four pods that end with the codes they should,
// the pod's readiness shown 503 during the drain, no warning or error from
// the supervisor, and a # line that explains each line that looks wrong.
func TestDemo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, path := range map[string]string{"proxy-supervisor": bin.supervisor, "fake-envoy": bin.envoy} {
		if err := os.Symlink(path, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	script, err := filepath.Abs("../scripts/demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--net", "sh", "-c", `ip link set lo up && exec bash "$0"`, script)
	cmd.Env = append(os.Environ(), "BIN="+dir)
	// In a process group of its own, which the test's cleanup kills: the
	// demo's supervisors and fake Envoys with it, whatever the script did.
	demo := proctest.Start(t, "demo", cmd)
	code := demo.Exit(60 * time.Second)
	text := demo.Out.String()
	if code != 0 {
		t.Fatalf("demo exited %d:\n%s", code, text)
	}
	for _, want := range []string{
		"[pod] proxy container exited 0; the Job's pod completes\n",
		"[app] exec exited 3\n",
		"[pod] proxy container exited 3\n",
		"[pod] the restarted proxy container exited 0 without starting the proxy\n",
		"/healthz/ready: HTTP/1.1 503 Service Unavailable\n",
		"[hook] preStop returned: drained\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	// The preStop hook must have waited for the app's port, not ended on
	// --drain-min before the app was told to stop.
	if sig, ret := strings.Index(text, "[app] SIGTERM from the kubelet"), strings.Index(text, "[hook] preStop returned"); sig < 0 || ret < sig {
		t.Errorf("the preStop hook returned before the app's SIGTERM (at %d and %d)", ret, sig)
	}
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			t.Errorf("the supervisor warned during the demo: a newcomer reads that as a fault: %s", l)
		}
	}
	// Each line that looks wrong is followed, within its step, by a # line
	// that says why it is expected. exec's line comes only when the
	// supervisor stopped before exec's poke: a race the demo does not fix.
	lines := strings.Split(text, "\n")
	for _, odd := range []struct {
		re     *regexp.Regexp
		always bool
	}{
		{regexp.MustCompile(`^proxy-supervisor: exec: completion of app \(exit 0\) recorded`), false},
		{regexp.MustCompile(`msg="proxy exited" .*code=0 exit_code=3`), true},
		{regexp.MustCompile(`^proxy-supervisor: complete: .*no supervisor is listening`), true},
		{regexp.MustCompile(`"ready": true,`), true},
	} {
		i := indexMatch(lines, odd.re)
		if i < 0 {
			if odd.always {
				t.Errorf("no line matches %s", odd.re)
			}
			continue
		}
		explained := false
		for _, l := range lines[i+1:] {
			if strings.HasPrefix(l, "== ") {
				break
			}
			if strings.HasPrefix(strings.TrimSpace(l), "# ") {
				explained = true
				break
			}
		}
		if !explained {
			t.Errorf("%q has no # line after it in its step", lines[i])
		}
	}
	if t.Failed() {
		t.Logf("the demo's output:\n%s", text)
	}
}

func indexMatch(lines []string, re *regexp.Regexp) int {
	for i, l := range lines {
		if re.MatchString(l) {
			return i
		}
	}
	return -1
}
