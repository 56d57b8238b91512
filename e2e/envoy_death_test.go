package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// A pilot-agent-like child exits 0 a few milliseconds after the Envoy under
// it died, well inside the tracker's one-second poll of a ready proxy: the
// exit is still logged as Envoy's death, and the code is the child's.
func TestEnvoyDeathUnderAnAgentIsLogged(t *testing.T) {
	p := newPod(t)
	ready := p.dir + "/envoy-ready"
	agent := fmt.Sprintf(`"$0" --ready-file %s &
e=$!
while [ ! -e %s ]; do sleep 0.02; done
sleep 0.3
kill -KILL $e
wait $e
sleep 0.01
exit 0`, ready, ready)
	sup := p.start("supervisor", true, nil, bin.supervisor, "supervise", "--control-dir", p.dir,
		"--health-addr", "127.0.0.1:15022", "--", "/bin/sh", "-c", agent, bin.envoy)
	p.waitHTTP(readyURL, 200, soon)
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d, want the child's 0", code)
	}
	var exitLine string
	for _, line := range strings.Split(sup.Out.String(), "\n") {
		if strings.Contains(line, `msg="proxy exited"`) {
			exitLine = line
		}
	}
	if !strings.Contains(exitLine, "envoy_died_at=") {
		t.Fatalf("the proxy's exit was not logged as Envoy's death: %q", exitLine)
	}
}
