package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// Envoy's admin API on a unix socket (admin.address.pipe), as the plain-Envoy
// manifests run it: nothing listens on a TCP admin port, and readiness, the
// release, the drain and the stop all go over the socket.
func TestAdminOverUnixSocket(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sock := filepath.Join(p.dir, "admin.sock")
	sup := p.supervise([]string{"--admin-url", "unix://" + sock, "--drain-min", "0s", "--drain-timeout", "20s"},
		"--config-yaml", "admin: {address: {pipe: {path: "+sock+"}}}")
	p.waitHTTP(readyURL, 200, soon)
	if c, err := p.netns.Dial(context.Background(), "tcp", "127.0.0.1:15000"); err == nil {
		c.Close()
		t.Fatal("an admin API listens on TCP 15000")
	}
	sup.WaitLog(`msg="drain call chosen" envoy=1.37.2 call=/drain_listeners?graceful&inboundonly&skip_exit`, soon)
	if code := p.prestop().Exit(soon); code != 0 {
		t.Fatalf("prestop exit %d", code)
	}
	deleted(t, sup)
	out := sup.Out.String()
	if strings.Contains(out, "failed") || strings.Contains(out, "escalated") {
		t.Errorf("an admin call failed, or the stop needed a signal:\n%s", out)
	}
}
