package supervise

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
	"golang.org/x/sys/unix"
)

// breakListener shuts down this process's listening socket that matches, so
// that the server accepting on it fails the way a real one would: accept
// returns an error and Serve ends with it.
func breakListener(t *testing.T, match func(unix.Sockaddr) bool) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if on, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || on != 1 {
			continue
		}
		sa, err := unix.Getsockname(fd)
		if err != nil || !match(sa) {
			continue
		}
		if err := unix.Shutdown(fd, unix.SHUT_RDWR); err != nil {
			t.Fatalf("shutdown fd %d: %v", fd, err)
		}
		return
	}
	t.Fatal("no such listening socket in this process")
}

// When any actor but the proxy fails, the supervisor stops the proxy, exits
// non-zero within the stop timeout, and leaves nothing of the proxy's
// group behind. (Once, the failed actor's interrupt cancelled the reaper
// too, and Run waited forever for an exit nobody delivered.)
func TestActorFailureStopsTheProxy(t *testing.T) {
	tests := []struct {
		actor string
		match func(h *harness) func(unix.Sockaddr) bool
	}{
		{"health server", func(h *harness) func(unix.Sockaddr) bool {
			return func(sa unix.Sockaddr) bool {
				in, ok := sa.(*unix.SockaddrInet4)
				return ok && in.Port == int(h.healthPort)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.actor, func(t *testing.T) {
			h := startSupervisor(t, func(h *harness, c *Config) {
				h.healthPort = proctest.FreePort(t)
				c.HealthAddr = fmt.Sprintf("127.0.0.1:%d", h.healthPort)
			})
			h.waitReady()
			pgid := h.status().ProxyPID
			breakListener(t, tt.match(h))
			// The order of events, not a race against a clock: the
			// termination actor stops the proxy for the actor's end, and
			// /quitquitquit is enough (no escalation, below).
			code := h.wait(h.cfg.StopTimeout + 10*time.Second)
			if !h.logged("stop requested", "reason", "shutting down") {
				t.Errorf("no stop for the %s's end", tt.actor)
			}
			if code == 0 {
				t.Errorf("Run = 0 after the %s failed; want non-zero", tt.actor)
			}
			if h.err == nil {
				t.Errorf("Run returned no error after the %s failed", tt.actor)
			}
			if err := syscall.Kill(-pgid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("the proxy's group %d is still there after Run: %v", pgid, err)
			}
			if h.countLogged("escalated to SIGKILL") > 0 {
				t.Error("the proxy needed SIGKILL; /quitquitquit should have been enough")
			}
		})
	}
}
