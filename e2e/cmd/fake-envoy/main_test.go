package main

import (
	"bytes"
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

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

func TestMain(m *testing.M) { os.Exit(proctest.Main(m, nil)) }

// build returns the fake-envoy binary, built once for all tests.
func build(t *testing.T) string {
	t.Helper()
	return proctest.Build(t, proctest.FakeEnvoy)
}

// proc is a running fake-envoy.
type proc struct {
	*proctest.Proc
	t      *testing.T
	dir    string
	stderr *proctest.Buffer // all it writes: the fake writes nothing to stdout
}

// start runs the binary on free ports with an admin address file and a ready file.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, dir: configDir(t)}
	args = append([]string{"--admin-addr", "127.0.0.1:0",
		"--admin-address-path", filepath.Join(p.dir, "admin"),
		"--ready-file", filepath.Join(p.dir, "ready")}, args...)
	cmd := exec.Command(build(t), args...)
	cmd.Dir = p.dir
	p.Proc = proctest.Start(t, "fake-envoy", cmd)
	p.stderr = p.Out
	return p
}

// configDir is a directory to run the fake in, holding the bootstraps the
// tests name by relative paths: pilot-agent's etc/istio/proxy/envoy-rev.json
// and etc/envoy.yaml, both empty configs.
func configDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"etc/istio/proxy/envoy-rev.json": "{}", "etc/envoy.yaml": "{}\n"} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// waitFile waits until the file name holds what ok accepts.
func (p *proc) waitFile(name string, ok func(string) bool) string {
	p.t.Helper()
	var b []byte
	var err error
	read := func() bool {
		b, err = os.ReadFile(filepath.Join(p.dir, name))
		return (err == nil && ok(string(b))) || p.Exited()
	}
	if !proctest.Until(5*time.Second, read) {
		p.t.Fatalf("%s never appeared (last %q, %v)", name, b, err)
	}
	if err != nil || !ok(string(b)) {
		p.t.Fatalf("exited (%v) before %s appeared", p.Status(), name)
	}
	return string(b)
}

// bound waits until the admin port is bound: signal set-up is over by then.
// The address file is created empty and then written, so an empty one does
// not count.
func (p *proc) bound() string {
	return p.waitFile("admin", func(addr string) bool { return addr != "" })
}

// live waits until the fake is LIVE and its handlers are installed.
func (p *proc) live() string {
	p.waitFile("ready", func(string) bool { return true })
	return p.bound()
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	p.Signal(sig)
}

// exited waits for the process to end.
func (p *proc) exited(within time.Duration) syscall.WaitStatus {
	p.t.Helper()
	p.Exit(within)
	return p.Status()
}

// alive reports that the process is still running after d.
func (p *proc) alive(d time.Duration) bool { return !p.Wait(d) }

func get(admin, method, path string, timeout time.Duration) (int, string, error) {
	req, _ := http.NewRequest(method, "http://"+admin+path, nil)
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestTermAndIntAfterInitExitZero(t *testing.T) {
	t.Parallel()
	for sig, line := range map[syscall.Signal]string{
		unix.SIGTERM: "[warning][main] caught ENVOY_SIGTERM\n",
		unix.SIGINT:  "[warning][main] caught SIGINT\n",
	} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			p := start(t, "--listener", "in=127.0.0.1:0,inbound", "--drain-time-s", "600")
			p.live()
			began := time.Now()
			p.signal(sig)
			ws := p.exited(5 * time.Second)
			if !ws.Exited() || ws.ExitStatus() != 0 {
				t.Fatalf("status %v, want exit 0", ws)
			}
			if took := time.Since(began); took > 2*time.Second {
				t.Errorf("took %v: SIGTERM must not wait for a drain", took)
			}
			for _, want := range []string{line, "shutting down server instance\n", "[info][main] exiting\n"} {
				if !strings.Contains(p.stderr.String(), want) {
					t.Errorf("stderr lacks %q", want)
				}
			}
		})
	}
}

func TestSignalsBeforeInitKill(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGUSR1, unix.SIGUSR2} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			p := start(t, "--stay-initializing")
			admin := p.bound()
			// PRE_INITIALIZING comes first, for as long as a busy machine
			// takes to reach the next phase.
			var body string
			var err error
			if !proctest.Until(10*time.Second, func() bool {
				_, body, err = get(admin, "GET", "/ready", 2*time.Second)
				return err == nil && body == "INITIALIZING\n"
			}) {
				t.Fatalf("/ready %q %v", body, err)
			}
			p.signal(sig)
			ws := p.exited(5 * time.Second)
			if !ws.Signaled() || ws.Signal() != sig {
				t.Fatalf("status %v, want death by %v", ws, sig)
			}
			if strings.Contains(p.stderr.String(), "caught") {
				t.Errorf("a handler ran before init:\n%s", p.stderr.String())
			}
		})
	}
}

func TestUSR2KillsAfterInit(t *testing.T) {
	t.Parallel()
	p := start(t)
	p.live()
	p.signal(unix.SIGUSR2)
	if ws := p.exited(5 * time.Second); !ws.Signaled() || ws.Signal() != unix.SIGUSR2 {
		t.Fatalf("status %v, want death by SIGUSR2", ws)
	}
}

func TestHUPAndUSR1AfterInitAreHandled(t *testing.T) {
	t.Parallel()
	p := start(t)
	admin := p.live()
	p.signal(unix.SIGHUP)
	p.signal(unix.SIGUSR1)
	if !p.alive(300 * time.Millisecond) {
		t.Fatalf("died: %v", p.Status())
	}
	if code, body, err := get(admin, "GET", "/ready", 2*time.Second); err != nil || code != 200 || body != "LIVE\n" {
		t.Fatalf("/ready %d %q %v", code, body, err)
	}
	for _, want := range []string{
		"[warning][main] caught and eating SIGHUP. See documentation for how to hot restart.\n",
		"[info][main] caught SIGUSR1. Reopening access logs.\n",
		"reopening access logs\n",
	} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	p.signal(unix.SIGTERM)
	if ws := p.exited(5 * time.Second); ws.ExitStatus() != 0 {
		t.Errorf("SIGTERM after HUP: %v", ws)
	}
}

func TestQuitQuitQuitExitsZeroAtOnce(t *testing.T) {
	t.Parallel()
	p := start(t, "--listener", "in=127.0.0.1:0")
	admin := p.live()
	began := time.Now()
	if code, body, err := get(admin, "POST", "/quitquitquit", 2*time.Second); err != nil || code != 200 || body != "OK\n" {
		t.Fatalf("quitquitquit: %d %q %v", code, body, err)
	}
	ws := p.exited(5 * time.Second)
	if !ws.Exited() || ws.ExitStatus() != 0 {
		t.Fatalf("status %v", ws)
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("exit took %v", took)
	}
}

func TestCrashDiesOfSIGSEGV(t *testing.T) {
	t.Parallel()
	p := start(t, "--crash-after", "200ms")
	p.live()
	ws := p.exited(5 * time.Second)
	if !ws.Signaled() || ws.Signal() != unix.SIGSEGV {
		t.Fatalf("status %v, want death by SIGSEGV (139)", ws)
	}
	if !strings.Contains(p.stderr.String(), "[critical][main] Caught Segmentation fault") {
		t.Errorf("no crash log:\n%s", p.stderr.String())
	}
}

// The crash comes at an event, not a time: once the listeners have sent
// their second answer, which its client gets whole.
func TestCrashAfterAnswers(t *testing.T) {
	t.Parallel()
	p := start(t, "--listener", "in=127.0.0.1:0", "--crash-after-answers", "2")
	admin := p.live()
	_, listeners, err := get(admin, "GET", "/listeners", 5*time.Second)
	_, addr, ok := strings.Cut(strings.TrimSpace(listeners), "::")
	if err != nil || !ok {
		t.Fatalf("/listeners: %q %v", listeners, err)
	}
	// The second answer shows that the first did not end it.
	for i := 1; i <= 2; i++ {
		if code, body, err := get(addr, "GET", "/hello", 5*time.Second); err != nil || code != 200 || body != "fake-envoy listener in\n" {
			t.Fatalf("answer %d: %d %q %v", i, code, body, err)
		}
	}
	if ws := p.exited(5 * time.Second); !ws.Signaled() || ws.Signal() != unix.SIGSEGV {
		t.Fatalf("status %v, want death by SIGSEGV (139)", ws)
	}
}

func TestHangOnTermDiesOnlyToSIGKILL(t *testing.T) {
	t.Parallel()
	p := start(t, "--hang-on-term")
	admin := p.live()
	p.signal(unix.SIGTERM)
	p.signal(unix.SIGINT)
	if code, body, err := get(admin, "POST", "/quitquitquit", 2*time.Second); err != nil || code != 200 || body != "OK\n" {
		t.Fatalf("quitquitquit: %d %q %v", code, body, err)
	}
	if !p.alive(time.Second) {
		t.Fatalf("exited: %v", p.Status())
	}
	if !strings.Contains(p.stderr.String(), "caught ENVOY_SIGTERM") {
		t.Error("SIGTERM not acknowledged")
	}
	p.signal(unix.SIGKILL)
	if ws := p.exited(5 * time.Second); !ws.Signaled() || ws.Signal() != unix.SIGKILL {
		t.Fatalf("status %v", ws)
	}
}

func TestHangOnTermSurvivesTermBeforeInit(t *testing.T) {
	t.Parallel()
	p := start(t, "--hang-on-term", "--stay-initializing")
	p.bound()
	p.signal(unix.SIGTERM)
	if !p.alive(300 * time.Millisecond) {
		t.Fatalf("exited: %v", p.Status())
	}
}

func TestExitAfter(t *testing.T) {
	t.Parallel()
	// Counted from the start: a busy machine may not have made it LIVE by
	// then, which this does not test.
	p := start(t, "--exit-after", "200ms", "--exit-code", "7")
	if ws := p.exited(5 * time.Second); !ws.Exited() || ws.ExitStatus() != 7 {
		t.Fatalf("status %v, want exit 7", ws)
	}
}

func TestConfigErrorExitsOne(t *testing.T) {
	t.Parallel()
	p := start(t, "--config-error", "-c", "/etc/envoy/envoy.yaml")
	if ws := p.exited(5 * time.Second); !ws.Exited() || ws.ExitStatus() != 1 {
		t.Fatalf("status %v, want exit 1", ws)
	}
	if !strings.Contains(p.stderr.String(), "[critical][main] error initializing configuration '/etc/envoy/envoy.yaml': ") {
		t.Errorf("stderr:\n%s", p.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(p.dir, "admin")); err == nil {
		t.Error("a config error bound the admin port")
	}
}

func TestCommandLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"--help"}, 0, "--drain-time-s seconds"},
		{[]string{"--no-such-flag"}, 1, "flag provided but not defined"},
		{[]string{"--drain-strategy", "slow"}, 1, "PARSE ERROR"},
		{[]string{"--listener", "nameless"}, 1, "want name=ADDR"},
		{[]string{"--listener", "x=127.0.0.1:0,udp"}, 1, "unknown option"},
		{[]string{"stray"}, 1, "unexpected argument"},
	}
	for _, tt := range tests {
		cmd := exec.Command(build(t), tt.args...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != tt.code || !strings.Contains(string(out), tt.out) {
			t.Errorf("%q: exit %d, want %d; output lacks %q:\n%s", tt.args, code, tt.code, tt.out, out)
		}
	}
}

func TestEnvoyFlagsAreAccepted(t *testing.T) {
	t.Parallel()
	p := start(t, "-c", "etc/istio/proxy/envoy-rev.json", "--drain-time-s", "45", "--drain-strategy", "immediate",
		"--disable-hot-restart", "--local-address-ip-version", "v4", "--log-format", "%Y", "-l", "warning")
	admin := p.live()
	_, body, err := get(admin, "GET", "/server_info", 2*time.Second)
	if err != nil || !strings.Contains(body, `"drain_time": "45s"`) || !strings.Contains(body, `"config_path": "etc/istio/proxy/envoy-rev.json"`) {
		t.Fatalf("/server_info %v:\n%s", err, body)
	}
	if strings.Contains(p.stderr.String(), "[info]") {
		t.Error("-l warning still logs info")
	}
}

func control(t *testing.T, path, line string) string {
	t.Helper()
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c, line+"\n")
	b := make([]byte, 256)
	n, _ := c.Read(b)
	return string(b[:n])
}

func TestControlSocket(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	p := start(t, "--control", sock, "--stay-initializing")
	admin := p.bound()
	steps := []struct {
		line, answer, ready string
	}{
		{"state LIVE", "ok\n", "LIVE\n"},
		{"state DRAINING", "ok\n", "DRAINING\n"},
		{"state PRE_INITIALIZING", "ok\n", "PRE_INITIALIZING\n"},
		{"state live", "error: unknown server state \"live\"\n", "PRE_INITIALIZING\n"},
		{"state INITIALIZING", "ok\n", "INITIALIZING\n"},
		{"dance", "error: unknown command \"dance\"\n", "INITIALIZING\n"},
		{"exit 300", "error: exit \"300\": want a code from 0 to 255\n", "INITIALIZING\n"},
	}
	for _, s := range steps {
		if got := control(t, sock, s.line); got != s.answer {
			t.Errorf("%q: answer %q, want %q", s.line, got, s.answer)
		}
		if _, body, err := get(admin, "GET", "/ready", 2*time.Second); err != nil || body != s.ready {
			t.Errorf("after %q: /ready %q %v, want %q", s.line, body, err, s.ready)
		}
	}
	if got := control(t, sock, "silent on"); got != "ok\n" {
		t.Fatalf("silent on: %q", got)
	}
	if _, _, err := get(admin, "GET", "/ready", 200*time.Millisecond); err == nil {
		t.Error("answered while silent")
	}
	control(t, sock, "silent off")
	if _, _, err := get(admin, "GET", "/ready", 2*time.Second); err != nil {
		t.Errorf("silent off: %v", err)
	}
	// busy answers at the spell's end, which the next /ready begins,
	// saying how many admin requests it held.
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "busy 300ms\n")
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, _, err := get(admin, "GET", "/ready", 100*time.Millisecond); err != nil {
			break // held: the spell has begun
		}
		if time.Now().After(deadline) {
			t.Fatal("busy 300ms: no /ready held within 5s")
		}
	}
	b := make([]byte, 256)
	n, _ := c.Read(b)
	if got := string(b[:n]); !strings.HasPrefix(got, "ok: held ") || !strings.HasSuffix(got, " admin requests for 300ms\n") || got == "ok: held 0 admin requests for 300ms\n" {
		t.Errorf("busy 300ms: %q", got)
	}
	if got := control(t, sock, "busy 0"); got != "error: busy \"0\": want a duration such as 2s\n" {
		t.Errorf("busy 0: %q", got)
	}
	if got := control(t, sock, "exit 3"); got != "ok\n" {
		t.Fatalf("exit 3: %q", got)
	}
	if ws := p.exited(5 * time.Second); !ws.Exited() || ws.ExitStatus() != 3 {
		t.Fatalf("status %v, want exit 3", ws)
	}
}

func TestControlCrash(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	p := start(t, "--control", sock)
	p.live()
	if got := control(t, sock, "crash"); got != "ok\n" {
		t.Fatalf("crash: %q", got)
	}
	if ws := p.exited(5 * time.Second); !ws.Signaled() || ws.Signal() != unix.SIGSEGV {
		t.Fatalf("status %v", ws)
	}
}

// TestOrphansAreLeftToTheSubreaper makes the test process a subreaper, so the orphans
// come to it, as they come to the supervisor.
func TestOrphansAreLeftToTheSubreaper(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	const n = 3
	p := start(t, "--orphans", strconv.Itoa(n), "--orphan-life", "10s")
	p.live()
	fake, binary := p.Pid(), build(t)
	var orphans []int
	underFake := 0
	handed := func() bool {
		orphans, underFake = orphans[:0], 0
		for _, pr := range processes(t) {
			if pr.ppid == fake {
				underFake++ // the intermediate child, if it is not reaped yet
			}
			if pr.exe != binary || pr.mode != orphanMode {
				continue
			}
			switch pr.ppid {
			case fake:
				t.Fatalf("grandchild %d is the fake's own child", pr.pid)
			case os.Getpid():
				orphans = append(orphans, pr.pid)
			}
			// Otherwise its parent, the intermediate child, is still exiting.
		}
		return len(orphans) == n && underFake == 0
	}
	if !proctest.Until(5*time.Second, handed) {
		t.Fatalf("%d orphans with the subreaper as parent, %d processes under the fake; want %d and 0", len(orphans), underFake, n)
	}
	if p.Exited() {
		t.Fatal("fake exited")
	}
	for _, pid := range orphans {
		unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
			t.Errorf("reap orphan %d: %v", pid, err)
		}
	}
}

type process struct {
	pid, ppid int
	exe, mode string
}

func processes(t *testing.T) []process {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The fields after "(comm) " are: state ppid …
		i := bytes.LastIndexByte(stat, ')')
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) < 2 {
			continue
		}
		pr := process{pid: pid}
		pr.ppid, _ = strconv.Atoi(fields[1])
		pr.exe, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
			if args := strings.Split(string(cmdline), "\x00"); len(args) > 1 {
				pr.mode = args[1]
			}
		}
		out = append(out, pr)
	}
	return out
}
