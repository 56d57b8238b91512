package supervise

import (
	"bufio"
	"context"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// A preStop before the proxy was ready is remembered: the hook returns at
// once, /healthz/ready says why it is not ready, and when the proxy does
// become ready (a sidecar restarted during the pod's termination, whose
// hook the kubelet replays) the drain starts at once and /healthz/ready
// never says ready; the SIGTERM then stops it, 0. The fake Envoy stays
// initializing until the test turns it LIVE, after the hook.
func TestPreStopBeforeReadyDrainsOnceReady(t *testing.T) {
	ctl := filepath.Join(proctest.ShortDir(t), "envoy.sock")
	h := startSupervisor(t, func(_ *harness, c *Config) { c.DrainTimeout = time.Minute }, "--stay-initializing", "--control", ctl)
	h.eventually("the proxy has started", func() bool { return h.logged("proxy started") })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ok, why := h.s.Drain(ctx); !ok || why != control.NeverReady {
		t.Fatalf("preStop before ready = %v, %q; want at once, %q", ok, why, control.NeverReady)
	}
	if ready, why := h.s.healthReady(); ready || !strings.Contains(why, "a preStop came before the proxy was ready") {
		t.Fatalf("/healthz/ready after the early preStop: %v %q, want not ready, saying why", ready, why)
	}
	envoyControl(t, ctl, "state LIVE")
	h.eventually("the drain starts once the proxy is ready", func() bool { return h.logged("drain started") })
	if ready, why := h.s.healthReady(); ready || why != "draining" {
		t.Fatalf("/healthz/ready once the drain started: %v %q, want draining", ready, why)
	}
	if s := h.status(); !s.Ready || !s.Draining {
		t.Fatalf("status: ready %v, draining %v; want the proxy's readiness taken for the pod's clients, and the drain", s.Ready, s.Draining)
	}
	h.signal(syscall.SIGTERM)
	if code := h.wait(10 * time.Second); code != 0 {
		t.Fatalf("Run = %d after the drain and SIGTERM, want 0", code)
	}
}

// envoyControl sends one command line to the fake Envoy's control socket
// (its --control) once it takes connections, and wants "ok" back.
func envoyControl(t *testing.T, path, line string) {
	t.Helper()
	var c net.Conn
	if !proctest.Until(10*time.Second, func() bool {
		var err error
		c, err = net.Dial("unix", path)
		return err == nil
	}) {
		t.Fatalf("the fake Envoy's control socket %s takes no connection", path)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	answer, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(answer, "ok") {
		t.Fatalf("%s: %q, %v", line, answer, err)
	}
}
