package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"testing"
)

// The binary as the tests build it (go build, no -X) says one thing of
// itself in both places: its version line, and the labels of
// proxy_supervisor_build_info on a running supervisor's /metrics.
func TestBuildInfoIsTheVersionLine(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(bin.supervisor, "--version").Output()
	if err != nil {
		t.Fatalf("--version: %v", err)
	}
	m := regexp.MustCompile(`^proxy-supervisor (\S+) \(commit (\S+), date (\S+), (go\S+)\)\n$`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("--version printed %q, want proxy-supervisor VERSION (commit COMMIT, date DATE, GOVERSION)", out)
	}
	p := newPod(t)
	sup := p.supervise(nil)
	p.waitHTTP(readyURL, 200, soon)
	series := fmt.Sprintf(`proxy_supervisor_build_info{version=%q,commit=%q,date=%q,goversion=%q}`, m[1], m[2], m[3], m[4])
	if v, ok := p.metric(series); !ok || v != 1 {
		_, body := p.get(metricsURL)
		t.Fatalf("/metrics has no %s 1:\n%s\nsupervisor:\n%s", series, body, sup.Out.String())
	}
}
