package supervise

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// The tests run a real Supervisor in this process. New makes the test
// process a child subreaper and Run reaps with wait4(-1), so the tests
// never run in parallel (two reapers would steal each other's exits) and
// never call exec.Cmd.Wait while a Supervisor runs.

var envoyBin string // cmd/fake-envoy, built once

// helperEnv runs this binary as a helper process instead of the tests.
const helperEnv = "SUPERVISE_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(proctest.Main(m, func() error {
		// Under -race the fake Envoy is race-built too, and such a binary
		// sleeps a second at exit unless told not to; the proxies these
		// tests start inherit this process's environment.
		if err := os.Setenv("GORACE", "atexit_sleep_ms=0"); err != nil {
			return err
		}
		bins, err := proctest.Binaries(proctest.FakeEnvoy)
		if err == nil {
			envoyBin = bins[0]
		}
		return err
	}))
}

// helper is a peer's exec in another process: "hold DIR NAME" marks NAME
// running, holds its lock, creates DIR/NAME.held and sleeps until killed.
func helper(mode string) int {
	f := strings.Fields(mode)
	if len(f) != 3 || f[0] != "hold" {
		fmt.Fprintln(os.Stderr, "bad helper mode", mode)
		return 2
	}
	if _, err := peers.Open(f[1]).Begin(f[2]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.WriteFile(filepath.Join(f[1], f[2]+".held"), nil, 0o644); err != nil {
		return 1
	}
	time.Sleep(time.Minute) // held until killed: nothing is awaited
	return 0
}

// harness is one Supervisor of the fake Envoy, run in this process.
type harness struct {
	t          *testing.T
	s          *Supervisor
	cfg        Config
	dir        string // the control dir
	adminPort  uint16
	healthPort uint16 // 0 unless a test serves health
	appPort    uint16 // the only port that counts as the app's
	client     *control.Client
	logs       *proctest.Buffer
	envoyLog   string // the fake Envoy's stdout and stderr

	started time.Time
	done    chan struct{}
	code    int
	err     error
	took    time.Duration
}

// setup prepares a Supervisor of the fake Envoy (started with envoyArgs)
// without running it; mod adjusts the config.
func setup(t *testing.T, mod func(h *harness, c *Config), envoyArgs ...string) *harness {
	t.Helper()
	h := &harness{t: t, dir: proctest.ShortDir(t), adminPort: proctest.FreePort(t), appPort: proctest.FreePort(t), logs: &proctest.Buffer{}}
	h.envoyLog = filepath.Join(proctest.ShortDir(t), "envoy.log")
	h.client = control.NewClient(h.dir)
	admin, err := http1.ParseURL(fmt.Sprintf("http://127.0.0.1:%d", h.adminPort))
	if err != nil {
		t.Fatal(err)
	}
	// exec keeps the fake Envoy the group leader the supervisor started;
	// the shell only redirects its output to a file the test can read.
	script := fmt.Sprintf(`exec "$0" "$@" >>'%s' 2>&1`, h.envoyLog)
	cmd := append([]string{"/bin/sh", "-c", script, envoyBin,
		"--admin-addr", fmt.Sprintf("127.0.0.1:%d", h.adminPort), "--log-level", "info"}, envoyArgs...)
	h.cfg = Config{
		Command:      cmd,
		AdminURL:     admin,
		ControlDir:   h.dir,
		Policy:       peers.Policy{Count: 1},
		QuitGrace:    time.Second,
		StopTimeout:  2 * time.Second,
		DrainTimeout: 2 * time.Second,
		// The host's own listeners must not hold a drain: only appPort is
		// the app's.
		ProxyUID: -1,
		AppPorts: []uint16{h.appPort},
		// Polls that would take a second in production take a tenth here,
		// and the drain's quiet period a third.
		Intervals: Intervals{TrackerReady: 100 * time.Millisecond, Rescan: 100 * time.Millisecond, DrainProgress: 100 * time.Millisecond, DrainQuiet: 100 * time.Millisecond},
		Log:       slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(h, &h.cfg)
	}
	h.s, err = New(h.cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(h.cleanup)
	return h
}

// start runs the Supervisor in the background.
func (h *harness) start() *harness {
	h.done = make(chan struct{})
	h.started = time.Now()
	go func() {
		defer close(h.done)
		h.code, h.err = h.s.Run()
		h.took = time.Since(h.started)
	}()
	return h
}

// startSupervisor is setup, then start.
func startSupervisor(t *testing.T, mod func(h *harness, c *Config), envoyArgs ...string) *harness {
	t.Helper()
	return setup(t, mod, envoyArgs...).start()
}

// cleanup makes sure no Supervisor (and so no reaper) outlives its test, and
// shows the logs of a failed one.
func (h *harness) cleanup() {
	if h.done == nil { // never run: give back what New took
		h.s.reaper.Stop()
	}
	if h.done != nil {
		select {
		case <-h.done:
		default:
			h.killProxy()
			select {
			case <-h.done:
			case <-time.After(10 * time.Second):
				h.t.Error("Run did not return after the test killed the proxy")
			}
		}
	}
	if h.t.Failed() {
		h.t.Logf("supervisor log:\n%s", h.logs.String())
		if b, err := proctest.ReadFile(h.envoyLog); err == nil {
			h.t.Logf("fake envoy log:\n%s", b)
		}
	}
}

// wait waits for Run to return and gives its code.
func (h *harness) wait(d time.Duration) int {
	h.t.Helper()
	select {
	case <-h.done:
		return h.code
	case <-time.After(d):
		h.t.Fatalf("Run did not return within %v", d)
		return -1
	}
}

// running fails the test if Run returns within d.
func (h *harness) running(d time.Duration) {
	h.t.Helper()
	select {
	case <-h.done:
		h.t.Fatalf("Run returned %d (err %v); want it still running", h.code, h.err)
	case <-time.After(d):
	}
}

func (h *harness) waitReady() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ok, why := h.s.WaitReady(ctx); !ok {
		h.t.Fatalf("proxy not ready: %s", why)
	}
	// What makes a SIGTERM a clean exit.
	if !h.s.life.everReady() {
		h.t.Fatal("WaitReady said ready, but the lifecycle was never ready")
	}
}

// complete reports a completion the way the control socket's handler
// does. It is called in-process for completions that end the run: over the
// socket, the 202 may be lost when the run ends first (see
// TestFinalAnswersAreDelivered).
func (h *harness) complete(peer string, code int, reason string) {
	h.t.Helper()
	if err := h.s.Complete(context.Background(), control.Completion{Peer: peer, Code: code, Reason: reason}); err != nil {
		h.t.Fatalf("Complete(%s, %d): %v", peer, code, err)
	}
}

// post is POST /v1/complete, for completions after which the run goes on.
func (h *harness) post(peer string, code int, reason string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.client.Complete(ctx, control.Completion{Peer: peer, Code: code, Reason: reason}); err != nil {
		h.t.Fatalf("POST /v1/complete %s %d: %v", peer, code, err)
	}
}

// signal hands sig to the supervisor as its signal actor would, once the
// proxy has started.
func (h *harness) signal(sig syscall.Signal) {
	h.t.Helper()
	h.eventually("the proxy has started", func() bool { return h.logged("proxy started") })
	h.s.onSignal(sig)
}

// killProxy kills the proxy's group, found in the log, so that a test that
// failed midway still ends its Run.
func (h *harness) killProxy() {
	for _, line := range strings.Split(h.logs.String(), "\n") {
		var e struct {
			Msg string `json:"msg"`
			Pid int    `json:"pid"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "proxy started" && e.Pid > 0 {
			syscall.Kill(-e.Pid, syscall.SIGKILL)
		}
	}
}

func (h *harness) status() control.Status { return h.s.Status() }

// statusJSON is GET /v1/status over the control socket, decoded loosely so
// that the wire names are checked.
func (h *harness) statusJSON() map[string]any {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := h.client.Status(ctx)
	if err != nil {
		h.t.Fatalf("GET /v1/status: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		h.t.Fatalf("status %s: %v", raw, err)
	}
	return m
}

// envoyOutput is what the fake Envoy wrote, as a proctest.Buffer keeps
// it: its log is as long as it ran.
func (h *harness) envoyOutput() string {
	b, _ := proctest.ReadFile(h.envoyLog)
	return b
}

func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	proctest.Eventually(h.t, 5*time.Second, what, cond)
}

// logged reports whether the supervisor logged a message that starts with
// msg and has each attribute (key, then a substring of its value).
func (h *harness) logged(msg string, kv ...string) bool {
	for _, line := range strings.Split(h.logs.String(), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		if m, _ := e["msg"].(string); !strings.HasPrefix(m, msg) {
			continue
		}
		match := true
		for i := 0; i+1 < len(kv); i += 2 {
			v, ok := e[kv[i]]
			if !ok || !strings.Contains(fmt.Sprint(v), kv[i+1]) {
				match = false
			}
		}
		if match {
			return true
		}
	}
	return false
}

// countLogged counts the messages that start with msg.
func (h *harness) countLogged(msg string) int {
	n := 0
	for _, line := range strings.Split(h.logs.String(), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) == nil {
			if m, _ := e["msg"].(string); strings.HasPrefix(m, msg) {
				n++
			}
		}
	}
	return n
}

// listenApp opens the app's listening socket.
func (h *harness) listenApp() net.Listener {
	h.t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", h.appPort))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { ln.Close() })
	return ln
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
