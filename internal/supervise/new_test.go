package supervise

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// New builds every part from the config and touches no file and no
// socket: the control dir is not created, the health port not bound, until
// Run.
func TestNewTouchesNoFileOrSocket(t *testing.T) {
	healthAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	var dir string
	h := setup(t, func(h *harness, c *Config) {
		dir = filepath.Join(h.dir, "control")
		c.ControlDir = dir
		c.HealthAddr = healthAddr
	})
	if h.s.sock == nil || h.s.health == nil || h.s.owner.HealthPort == 0 || h.s.owner.AdminPort != h.adminPort {
		t.Fatalf("New left parts unbuilt: socket %v, health %v, owner %+v", h.s.sock != nil, h.s.health != nil, h.s.owner)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("New made the control dir: %v", err)
	}
	ln, err := net.Listen("tcp", healthAddr)
	if err != nil {
		t.Fatalf("New bound the health port: %v", err)
	}
	ln.Close()
}

// A health port that cannot be bound ends Run before the proxy is forked,
// with the error in the termination message, and leaves no control socket.
func TestRunThatCannotBindForksNothing(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	msg := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(msg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h := setup(t, func(_ *harness, c *Config) {
		c.HealthAddr = taken.Addr().String()
		c.TerminationLog = msg
	}).start()
	if code := h.wait(10 * time.Second); code != 1 || h.err == nil || !strings.Contains(h.err.Error(), "health server") {
		t.Fatalf("Run = %d, %v; want 1 and the health server's error", code, h.err)
	}
	if pid := h.s.proc.Pid(); pid != 0 {
		t.Errorf("proxy forked (pid %d)", pid)
	}
	if _, err := os.Lstat(control.SocketPath(h.dir)); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
	if b, _ := os.ReadFile(msg); !strings.Contains(string(b), "exit 1") || !strings.Contains(string(b), "health server") {
		t.Errorf("termination message %q, want exit 1 with the error", b)
	}
}

// /metrics names the binary from New on: proxy_supervisor_build_info, 1,
// labelled with the build the command gave, the fields of its version line.
func TestBuildInfoMetric(t *testing.T) {
	h := setup(t, func(_ *harness, c *Config) {
		c.Build = Build{Version: "0.1.0+g65c9c78a0984", Commit: "65c9c78a0984dc6e083225f2a0a83b39c8c63599", Date: "2026-12-01T23:00:00Z", GoVersion: "go1.26.8"}
	})
	var b strings.Builder
	if _, err := h.s.m.reg.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	want := "# TYPE proxy_supervisor_build_info gauge\n" +
		`proxy_supervisor_build_info{version="0.1.0+g65c9c78a0984",commit="65c9c78a0984dc6e083225f2a0a83b39c8c63599",date="2026-12-01T23:00:00Z",goversion="go1.26.8"} 1` + "\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("/metrics lacks\n%s\nin\n%s", want, b.String())
	}
}
