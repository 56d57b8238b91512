// Package e2e runs the built binaries the way a kubelet would: the supervisor
// as PID 1 of a fresh PID namespace, inside a network namespace that stands in
// for the pod's (held open by a pause process), with a temp dir standing in
// for the shared emptyDir, and app processes that join the same network
// namespace. It needs root (CI runs as root), nsenter and ip.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

var bin struct {
	supervisor, envoy string
}

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("e2e: SKIPPED, needs root for namespaces")
		// Under CI a skip of the whole suite is a failure: it would pass
		// every test without running one (as kubelettest's skip does).
		if os.Getenv("CI") == "true" {
			fmt.Println("e2e: CI=true, so the skip fails the suite")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(proctest.Main(m, func() error {
		bins, err := proctest.Binaries(proctest.Supervisor, proctest.FakeEnvoy)
		if err == nil {
			bin.supervisor, bin.envoy = bins[0], bins[1]
		}
		return err
	}))
}

// pod is a network namespace and a shared volume. Each test has its own, so
// the tests run in parallel: the ports the supervisor and the fake Envoy bind
// are the pod's own, and the volume is the test's own temp dir.
type pod struct {
	t     testing.TB
	dir   string         // the emptyDir
	netns proctest.Netns // the pause process's
	pause *exec.Cmd
}

func newPod(t testing.TB) *pod {
	t.Helper()
	pause := exec.Command("sleep", "infinity")
	pause.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := pause.Start(); err != nil {
		t.Fatalf("pause: %v", err)
	}
	// The volume holds control.sock, whose path must fit in sun_path. It is
	// a directory of the test's own, as a t.TempDir() is: a test may change
	// the mode of its parent.
	dir := filepath.Join(proctest.ShortDir(t), "vol")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &pod{t: t, dir: dir, pause: pause, netns: proctest.NetnsOf(pause.Process.Pid)}
	t.Cleanup(func() { pause.Process.Kill(); pause.Wait() })
	up := proctest.Nsenter(pause.Process.Pid, []string{"net"}, "ip", "link", "set", "lo", "up")
	if b, err := exec.Command(up[0], up[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, b)
	}
	return p
}

// start runs argv inside the pod's network namespace, in the environment
// of cleanEnv(env): it is forked from a thread inside the namespace (no
// nsenter, so a client's start costs what it costs in a container). With
// newPID it is PID 1 of a new PID namespace, as a container's entrypoint is.
func (p *pod) start(name string, newPID bool, env []string, argv ...string) *proctest.Proc {
	p.t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = cleanEnv(env)
	if newPID {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	}
	return proctest.StartWith(p.t, name, cmd, func() error { return p.netns.Do(cmd.Start) })
}

// cleanEnv is the environment without the Go runtime knobs a caller may
// have set, so that the binaries run with the tuning they choose
// themselves, and with extra.
func cleanEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "GOMAXPROCS" || k == "GOMEMLIMIT" || k == "GOGC" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// exitCode is the code a shell would report: 128+N for signal N.
func exitCode(ps *os.ProcessState) int { return proctest.ExitCode(ps) }

// supervise starts the supervisor as PID 1 with the fake Envoy as its proxy.
func (p *pod) supervise(flags []string, envoyFlags ...string) *proctest.Proc {
	p.t.Helper()
	argv := append([]string{bin.supervisor, "supervise", "--control-dir", p.dir, "--health-addr", "127.0.0.1:15022"}, flags...)
	argv = append(argv, "--", bin.envoy)
	argv = append(argv, envoyFlags...)
	return p.start("supervisor", true, nil, argv...)
}

// client runs a client command of the binary in the pod and returns its code
// and output.
func (p *pod) client(timeout time.Duration, env []string, args ...string) (int, string) {
	p.t.Helper()
	pr := p.start(args[0], false, env, append([]string{bin.supervisor}, args...)...)
	if !pr.Wait(timeout) {
		p.t.Fatalf("%v did not finish within %v:\n%s", args, timeout, pr.Out.String())
	}
	return pr.Code(), pr.Out.String()
}

// listen opens a listening socket in the pod's network namespace: the app.
func (p *pod) listen(network, addr string) net.Listener {
	p.t.Helper()
	ln, err := p.netns.Listen(network, addr)
	if err != nil {
		p.t.Fatalf("app listen %s: %v", addr, err)
	}
	go func() { // accept and hold, as an app would
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	p.t.Cleanup(func() { ln.Close() })
	return ln
}

// unlisten closes ln, an app's port from listen, and returns once nothing
// listens there. Go closes the socket itself only once the Accept pending
// on it has woken, which a busy machine runs late: a test that signals the
// supervisor right after the app's close must not find the port still open.
func (p *pod) unlisten(ln net.Listener) {
	p.t.Helper()
	ln.Close()
	addr := ln.Addr().String()
	if !proctest.Until(soon, func() bool {
		c, err := p.netns.Dial(context.Background(), "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	}) {
		p.t.Fatalf("%s still accepts after its listener's close", addr)
	}
}

// http returns a client whose connections are made inside the pod.
func (p *pod) http() *http.Client {
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{DialContext: p.netns.Dial, DisableKeepAlives: true},
	}
}

// get fetches a URL inside the pod and returns the status and body; a
// transport error is status 0.
func (p *pod) get(url string) (int, string) {
	resp, err := p.http().Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if len(b) > maxBody {
		return resp.StatusCode, string(b[:maxBody]) + fmt.Sprintf("\n[e2e: the body was cut at %d bytes]", maxBody)
	}
	return resp.StatusCode, string(b)
}

// maxBody is as much as get reads of an answer: a fault's can be large
// (a series per completion made /metrics 3.3 MB) or never end, and the
// test binary must not hold it all.
const maxBody = 16 << 20

// waitHTTP waits (bounded) until url answers want.
func (p *pod) waitHTTP(url string, want int, d time.Duration) string {
	p.t.Helper()
	var code int
	var body string
	if !proctest.Until(d, func() bool { code, body = p.get(url); return code == want }) {
		p.t.Fatalf("%s: got %d %q, want %d within %v", url, code, body, want, d)
	}
	return body
}

const (
	readyURL   = "http://127.0.0.1:15022/healthz/ready"
	metricsURL = "http://127.0.0.1:15022/metrics"
)

// metric reads one unlabelled or labelled series from /metrics.
func (p *pod) metric(series string) (float64, bool) {
	_, body := p.get(metricsURL)
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

func writeFile(path, content string, mode os.FileMode) error {
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// fixture sends one command to the fake Envoy's --control socket, and
// returns its answer once the command is done.
func fixture(t testing.TB, sock, cmd string) string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("fake envoy control: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintln(c, cmd)
	b, _ := bufio.NewReader(c).ReadString('\n') // the fixture keeps the connection for more commands
	if !strings.HasPrefix(b, "ok") {
		t.Fatalf("fake envoy control %q: %q", cmd, b)
	}
	return b
}
