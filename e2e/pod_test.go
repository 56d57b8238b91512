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
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/proctest"
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
	dir   string // the emptyDir
	netns string // /proc/PID/ns/net of the pause process
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
	p := &pod{t: t, dir: dir, pause: pause, netns: fmt.Sprintf("/proc/%d/ns/net", pause.Process.Pid)}
	t.Cleanup(func() { pause.Process.Kill(); pause.Wait() })
	if b, err := exec.Command("nsenter", "--net="+p.netns, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, b)
	}
	return p
}

// proc is a process started in the pod, with its output kept for assertions.
type proc struct {
	*proctest.Proc
	t    testing.TB
	name string
	cmd  *exec.Cmd
	out  *proctest.Buffer
	done chan struct{} // closed once the process ended and code is set
	code int
}

// start runs argv inside the pod's network namespace. With newPID it is PID 1
// of a new PID namespace, as a container's entrypoint is.
func (p *pod) start(name string, newPID bool, env []string, argv ...string) *proc {
	p.t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	if newPID {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	}
	started := proctest.StartWith(p.t, name, cmd, func() error { return p.inNetns(cmd.Start) })
	pr := &proc{Proc: started, t: p.t, name: name, cmd: cmd, out: started.Out, done: make(chan struct{}), code: -1}
	go func() {
		<-started.Done()
		pr.code = started.Code()
		close(pr.done)
	}()
	return pr
}

// exitCode is the code a shell would report: 128+N for signal N.
func exitCode(ps *os.ProcessState) int { return proctest.ExitCode(ps) }

// supervise starts the supervisor as PID 1 with the fake Envoy as its proxy.
func (p *pod) supervise(flags []string, envoyFlags ...string) *proc {
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
	if !pr.wait(timeout) {
		p.t.Fatalf("%v did not finish within %v:\n%s", args, timeout, pr.out.String())
	}
	return pr.code, pr.out.String()
}

// wait reports whether the process ended within d; code is set then.
func (pr *proc) wait(d time.Duration) bool {
	if !pr.Wait(d) {
		return false
	}
	<-pr.done // closed right after, once code is set
	return true
}

// exit waits (bounded) for the process and returns its exit code.
func (pr *proc) exit(d time.Duration) int {
	pr.t.Helper()
	if !pr.wait(d) {
		pr.t.Fatalf("%s still running after %v", pr.name, d)
	}
	return pr.code
}

func (pr *proc) signal(sig syscall.Signal) {
	pr.t.Helper()
	pr.Signal(sig)
}

// waitLog waits (bounded) until the output holds s.
func (pr *proc) waitLog(s string, d time.Duration) {
	pr.t.Helper()
	pr.WaitLog(s, d)
}

// dial connects from inside the pod's network namespace.
func (p *pod) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := p.inNetns(func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// listen opens a listening socket in the pod's network namespace: the app.
func (p *pod) listen(network, addr string) net.Listener {
	p.t.Helper()
	var ln net.Listener
	if err := p.inNetns(func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	}); err != nil {
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

// inNetns runs fn on a thread inside the pod's network namespace: a socket
// belongs to the namespace of the thread that creates it, so the thread joins
// the pod's for the call and leaves again.
func (p *pod) inNetns(fn func() error) error {
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer self.Close()
	target, err := os.Open(p.netns)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// This thread is stuck in the pod's namespace: leave it locked so
		// that it dies with the goroutine instead of serving others.
		return fmt.Errorf("restore netns: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// http returns a client whose connections are made inside the pod.
func (p *pod) http() *http.Client {
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{DialContext: p.dial, DisableKeepAlives: true},
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
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

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

// fixture sends one command to the fake Envoy's --control socket.
func fixture(t testing.TB, sock, cmd string) {
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
}
