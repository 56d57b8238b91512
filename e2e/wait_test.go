package e2e

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
)

// wait returns as soon as the proxy is ready, even when it starts before the
// supervisor has created its socket.
func TestWaitReturnsWhenReady(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	// A socket that hangs up stands in for the supervisor until wait has
	// tried it: wait must retry, not fail. Then it goes, with any directory
	// made for it, as if nothing had been there.
	path := control.NewClient(p.dir).Path()
	_, err := os.Stat(filepath.Dir(path))
	made := os.IsNotExist(err)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	early, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	w := p.start("wait", false, nil, bin.supervisor, "wait", "--control-dir", p.dir, "--timeout", "30s")
	tried := make(chan error, 1)
	go func() {
		c, err := early.Accept()
		if err == nil {
			c.Close()
		}
		tried <- err
	}()
	select {
	case err := <-tried:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(soon):
		t.Fatal("wait never tried the socket")
	}
	early.Close() // removes the socket: no supervisor at all now
	if made {
		if err := os.Remove(filepath.Dir(path)); err != nil {
			t.Fatal(err)
		}
	}
	if w.Wait(0) {
		t.Fatalf("wait gave up at once (%d):\n%s", w.Code(), w.Out.String())
	}
	sup := p.supervise(nil, "--init-delay", "1s")
	sup.WaitLog("proxy ready", soon)
	ready := time.Now()
	if code := w.Exit(soon); code != 0 {
		t.Fatalf("wait exit %d:\n%s", code, w.Out.String())
	}
	if d := time.Since(ready); d > 2*time.Second {
		t.Fatalf("wait returned %v after readiness", d)
	}
}

// A wait that gives up fails, with a one-line reason; it never proceeds.
func TestWaitFailsAtTimeout(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise(nil, "--stay-initializing")
	sup.WaitLog("proxy started", soon)
	start := time.Now()
	code, out := p.client(soon, nil, "wait", "--control-dir", p.dir, "--timeout", "2s")
	if code == 0 {
		t.Fatal("wait succeeded without a ready proxy")
	}
	if d := time.Since(start); d < 2*time.Second || d > 10*time.Second {
		t.Fatalf("wait gave up after %v with --timeout 2s", d)
	}
	if !strings.Contains(out, "INITIALIZING") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("want one line naming Envoy's state, got %q", out)
	}
}

// --url polls a readiness URL: the fallback for a proxy that is not ours.
func TestWaitURL(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s"}, "--init-delay", "500ms")
	code, out := p.client(soon, nil, "wait", "--url", "http://127.0.0.1:15022/healthz/ready", "--timeout", "10s")
	if code != 0 {
		t.Fatalf("wait --url exit %d: %s", code, out)
	}
	sup.Signal(syscall.SIGTERM)
	sup.Exit(soon)
	code, out = p.client(soon, nil, "wait", "--url", "http://127.0.0.1:15022/healthz/ready", "--timeout", "2s")
	if code == 0 || !strings.Contains(out, "connection refused") {
		t.Fatalf("wait --url with nothing listening: exit %d, %q", code, out)
	}
}

// A dead Envoy is not ready: readiness goes 503 -> 200 -> 503.
func TestReadinessFollowsEnvoy(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	ctl := p.dir + "/envoy.sock"
	sup := p.supervise([]string{"--log-format", "json", "--drain-min", "0s"}, "--init-delay", "500ms", "--control", ctl)
	sup.WaitLog("proxy started", soon)
	p.waitHTTP(readyURL, 503, soon) // up, and not ready before Envoy is LIVE
	p.waitHTTP(readyURL, 200, soon)
	fixture(t, ctl, "silent on")
	body := p.waitHTTP(readyURL, 503, soon) // at the hold's end: no answer for 3 s
	if !strings.Contains(body, "does not answer within 3s") {
		t.Fatalf("503 without the reason: %q", body)
	}
	fixture(t, ctl, "silent off")
	p.waitHTTP(readyURL, 200, soon)
	sup.Signal(syscall.SIGTERM)
	sup.Exit(soon)
	for _, line := range strings.Split(strings.TrimSpace(sup.Out.String()), "\n") {
		if strings.HasPrefix(line, "{") {
			var v map[string]any
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatalf("--log-format json wrote a line that is not JSON: %q", line)
			}
		}
	}
	if !strings.Contains(sup.Out.String(), `"msg":"proxy ready"`) {
		t.Fatal("no JSON lifecycle line")
	}
}
