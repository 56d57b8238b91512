package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// dyingAgent is a pod whose proxy is a stand-in pilot-agent: it runs the
// fake Envoy (the sidecar's listeners) and exits 2, as Go's panic does,
// once the test calls die. The supervisor gets flags, and writes its
// termination message to term.
func dyingAgent(t *testing.T, flags ...string) (p *pod, sup *proctest.Proc, die func(), term string) {
	p = newPod(t)
	dieFile := p.dir + "/die"
	term = p.dir + "/termination-log"
	if err := os.WriteFile(term, nil, 0o644); err != nil { // the kubelet makes it
		t.Fatal(err)
	}
	agent := fmt.Sprintf(`"$0" "$@" &
while [ ! -e %s ]; do sleep 0.02; done
echo "panic: runtime error: invalid memory address or nil pointer dereference" >&2
exit 2`, dieFile)
	argv := append([]string{bin.supervisor, "supervise", "--control-dir", p.dir, "--health-addr", "127.0.0.1:15022", "--termination-log", term}, flags...)
	sup = p.start("supervisor", true, nil, append(argv, "--", "/bin/sh", "-c", agent, bin.envoy, "--config-yaml", sidecarBootstrap)...)
	return p, sup, func() {
		if err := os.WriteFile(dieFile, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		sup.WaitLog("the proxy's leader exited by itself in the middle of the drain", soon)
	}, term
}

// terminationMessage fails the test unless the message in term says want.
func terminationMessage(t *testing.T, term, want string) {
	t.Helper()
	msg, err := lastBytes(term, 4096) // what the kubelet reads
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(msg), want) {
		t.Errorf("termination message %q, want it to say %q", msg, want)
	}
}

// pilot-agent 1.28 to 1.30 panics (exit 2) when its drain POST fails
// (istio#60494), in the middle of the drain, and leaves its Envoy,
// reparented to the supervisor, carrying the app's requests. A stand-in
// agent runs the fake Envoy and exits 2 once the drain has made its call.
// The request in flight through Envoy is not cut, Envoy still serves new
// ones while the app runs, and once the app has closed its port (the
// drain's end) the supervisor stops Envoy itself, exits with the agent's
// code and says so in its termination message. (Before, the agent's exit
// killed its group at once: the request in flight was cut.)
func TestAgentDeathMidDrainKeepsEnvoyUntilTheDrainEnds(t *testing.T) {
	t.Parallel()
	p, sup, die, term := dyingAgent(t, "--drain-min", "0s")

	arrived, release := make(chan struct{}), make(chan struct{})
	var ln net.Listener
	if err := p.netns.Do(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:8080"); return err }); err != nil {
		t.Fatal(err)
	}
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(arrived)
			<-release
		}
		io.WriteString(w, "app"+r.URL.Path)
	})}
	go app.Serve(ln)
	t.Cleanup(func() { app.Close() })
	p.waitHTTP(readyURL, 200, soon)

	slow := make(chan string, 1)
	go func() {
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: p.netns.Dial}}
		resp, err := c.Get("http://127.0.0.1:9000/slow")
		if err != nil {
			slow <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		slow <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	select {
	case <-arrived:
	case <-time.After(soon):
		t.Fatal("the request through Envoy never reached the app")
	}

	hook := p.prestop()
	sup.WaitLog(`msg="listeners drained"`, soon)
	die()
	p.stillBlocked(sup, hook, 300*time.Millisecond)
	if code, body := p.get("http://127.0.0.1:9000/new"); code != 200 || body != "app/new" {
		t.Fatalf("a new request through Envoy after the agent's death: %d %q", code, body)
	}

	close(release)
	if got := <-slow; got != "200 app/slow" {
		t.Fatalf("the request in flight when the agent died: %s", got)
	}
	app.Close() // the app ends: the drain ends
	if code := sup.Exit(soon); code != 2 {
		t.Fatalf("supervisor exit %d, want the agent's 2:\n%s", code, sup.Out.String())
	}
	if code := hook.Exit(soon); code != 0 || !strings.Contains(hook.Out.String(), "drained") {
		t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
	}
	out := sup.Out.String()
	for _, want := range []string{"drain ended; stopping what the proxy's leader left", "nothing the proxy's leader left in its group runs any more"} {
		if !strings.Contains(out, want) {
			t.Errorf("the supervisor's log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "escalated to SIGKILL") {
		t.Errorf("Envoy needed SIGKILL:\n%s", out)
	}
	terminationMessage(t, term, "exit 2 (proxy exited by itself with code 2 during the drain that preStop started)")
}

// The drain's bound still holds after the agent's death: an app that never
// stops listening keeps Envoy no longer than --drain-timeout, and a
// SIGTERM's drain is held as a preStop's is.
func TestAgentDeathMidDrainEndsAtTheBound(t *testing.T) {
	t.Parallel()
	p, sup, die, term := dyingAgent(t, "--drain-min", "0s", "--drain-timeout", "2s")
	p.serveHTTP("127.0.0.1:8080", "app")
	p.waitHTTP(readyURL, 200, soon)
	sup.Signal(syscall.SIGTERM)
	sup.WaitLog(`msg="listeners drained"`, soon)
	die()
	if code, body := p.get("http://127.0.0.1:9000/"); code != 200 || body != "app" {
		t.Fatalf("a request through Envoy after the agent's death: %d %q", code, body)
	}
	if code := sup.Exit(10 * time.Second); code != 2 {
		t.Fatalf("supervisor exit %d, want the agent's 2", code)
	}
	out := sup.Out.String()
	if d := logTime(t, out, "drain ended; stopping what the proxy's leader left in its group").Sub(logTime(t, out, "drain started")); d < 2*time.Second {
		t.Errorf("Envoy was stopped %v into the drain, before its 2s bound", d)
	}
	if !strings.Contains(out, "nothing the proxy's leader left in its group runs any more") {
		t.Errorf("Envoy was not seen gone before the supervisor's exit:\n%s", out)
	}
	terminationMessage(t, term, "exit 2 (proxy exited by itself with code 2 during the drain that SIGTERM started)")
}

// Under --native-sidecar the preStop returns at once and the kubelet's
// SIGTERM comes once the app has exited: the dead agent's Envoy serves
// until then, and that SIGTERM stops it at once.
func TestAgentDeathInANativeSidecarsDrain(t *testing.T) {
	t.Parallel()
	p, sup, die, term := dyingAgent(t, "--native-sidecar")
	app := p.serveHTTP("127.0.0.1:8080", "app")
	p.waitHTTP(readyURL, 200, soon)
	if code := p.prestop().Exit(soon); code != 0 {
		t.Fatalf("prestop exit %d", code)
	}
	sup.WaitLog(`msg="listeners drained"`, soon)
	die()
	if code, body := p.get("http://127.0.0.1:9000/"); code != 200 || body != "app" {
		t.Fatalf("a request through Envoy after the agent's death: %d %q", code, body)
	}
	app.Close()
	sup.Signal(syscall.SIGTERM)
	if code := sup.Exit(soon); code != 2 {
		t.Fatalf("supervisor exit %d, want the agent's 2", code)
	}
	if out := sup.Out.String(); !strings.Contains(out, "nothing the proxy's leader left in its group runs any more") {
		t.Errorf("Envoy was not seen gone before the supervisor's exit:\n%s", out)
	}
	terminationMessage(t, term, "exit 2 (proxy exited by itself with code 2 during the drain that preStop started)")
}

// The real pilot-agent as the supervisor's child, ended mid-drain by
// SIGABRT, which a Go program answers as its panic does: a dump and exit 2.
// It sets no parent-death signal on Envoy (istio's pkg/envoy), so the fake
// Envoy it ran is reparented to the supervisor and serves on until the app
// has closed its port.
func TestPilotAgentDeathMidDrain(t *testing.T) {
	t.Parallel()
	agent, tmpl := needPilotAgent(t)
	p := newPod(t)
	term := p.dir + "/termination-log"
	if err := os.WriteFile(term, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env, argv := agentCommand(t, p, agent, tmpl, rootCertPEM(t), "--fake-version 1.37")
	sup := p.start("supervisor", true, env, append([]string{bin.supervisor, "supervise", "--control-dir", p.dir,
		"--health-addr", "127.0.0.1:15022", "--termination-log", term, "--drain-min", "0s", "--"}, argv...)...)
	app := p.serveHTTP("127.0.0.1:8080", "app")
	p.waitHTTP(readyURL, 200, time.Minute)
	hook := p.prestop()
	sup.WaitLog(`msg="listeners drained"`, soon)
	// The thread that forked it lists it.
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", sup.Pid()))
	var children []string
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		children = append(children, strings.Fields(string(b))...)
	}
	if len(children) != 1 {
		t.Fatalf("the supervisor's children: %q, want pilot-agent alone", children)
	}
	pid, err := strconv.Atoi(children[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGABRT); err != nil {
		t.Fatal(err)
	}
	sup.WaitLog("the proxy's leader exited by itself in the middle of the drain", soon)
	p.stillBlocked(sup, hook, 300*time.Millisecond)
	if code, body := p.get("http://127.0.0.1:9000/"); code != 200 || body != "app" {
		t.Fatalf("a request through Envoy after pilot-agent's death: %d %q", code, body)
	}
	app.Close()
	if code := sup.Exit(soon); code != 2 {
		t.Fatalf("supervisor exit %d, want pilot-agent's 2", code)
	}
	if !strings.Contains(sup.Out.String(), "nothing the proxy's leader left in its group runs any more") {
		t.Errorf("Envoy was not seen gone before the supervisor's exit")
	}
	terminationMessage(t, term, "exit 2 (proxy exited by itself with code 2 during the drain that preStop started)")
}
