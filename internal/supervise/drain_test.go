package supervise

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

func TestDrain(t *testing.T) {
	const hold = 300 * time.Millisecond
	tests := []struct {
		name      string
		mod       func(c *Config)
		envoyConn bool          // hold a connection through an Envoy listener
		appPort   bool          // the app listens on its port
		release   time.Duration // close what is held after this; 0 never
		before    bool          // every peer completes before the drain (under Always)
		during    time.Duration // every peer completes this long into the drain
		ok        bool
		why       string
		atLeast   time.Duration
		atMost    time.Duration
	}{
		{
			name: "nothing to wait for",
			ok:   true, why: "drained", atMost: hold,
		},
		{
			name:    "the app's listening port holds it until closed",
			appPort: true, release: hold,
			ok: true, why: "drained", atLeast: hold, atMost: hold + time.Second,
		},
		{
			name:      "an Envoy connection holds it until closed",
			envoyConn: true, release: hold,
			ok: true, why: "drained", atLeast: hold, atMost: hold + time.Second,
		},
		{
			name: "no sooner than DrainMin",
			mod:  func(c *Config) { c.DrainMin = 400 * time.Millisecond },
			ok:   true, why: "drained", atLeast: 400 * time.Millisecond, atMost: 400*time.Millisecond + time.Second,
		},
		{
			name:    "no later than DrainTimeout",
			mod:     func(c *Config) { c.DrainTimeout = 400 * time.Millisecond },
			appPort: true,
			ok:      false, why: "timeout", atLeast: 400 * time.Millisecond, atMost: 400*time.Millisecond + time.Second,
		},
		{
			name: "at once when every peer has completed, DrainMin and the app's port notwithstanding",
			mod: func(c *Config) {
				c.Policy = peers.Policy{Count: 1, Restart: peers.Always}
				c.DrainMin = 5 * time.Second
			},
			appPort: true, before: true,
			ok: true, why: "peers-completed", atMost: hold,
		},
		{
			name: "ends when every peer completes during it",
			mod: func(c *Config) {
				c.Policy = peers.Policy{Count: 1, Restart: peers.Always}
				c.DrainMin = 5 * time.Second
			},
			appPort: true, during: hold,
			ok: true, why: "peers-completed", atLeast: hold, atMost: hold + time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var envoyPort, healthPort uint16
			var args []string
			if tt.envoyConn {
				envoyPort = proctest.FreePort(t)
				args = append(args, "--listener", fmt.Sprintf("in=127.0.0.1:%d,inbound,tcp", envoyPort))
			}
			h := startSupervisor(t, func(h *harness, c *Config) {
				healthPort = proctest.FreePort(t)
				c.HealthAddr = fmt.Sprintf("127.0.0.1:%d", healthPort)
				if tt.mod != nil {
					tt.mod(c)
				}
			}, args...)
			h.waitReady()
			readyURL := fmt.Sprintf("http://127.0.0.1:%d/healthz/ready", healthPort)
			if code := httpStatus(t, readyURL); code != 200 {
				t.Fatalf("/healthz/ready before the drain: %d, want 200", code)
			}
			if tt.before {
				h.complete("app", 0, "")
				h.eventually("the peers settled", func() bool { return h.logged("peers completed; the proxy stays until SIGTERM") })
			}
			var held []interface{ Close() error }
			if tt.appPort {
				held = append(held, h.listenApp())
			}
			if tt.envoyConn {
				c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", envoyPort))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				// Make sure the fake Envoy has accepted it.
				if _, err := c.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if _, err := c.Read(make([]byte, 1)); err != nil {
					t.Fatalf("echo through the fake Envoy: %v", err)
				}
				held = append(held, c)
			}
			// From before the timers are set: their times are the drain's
			// lower bounds, and a start taken after them ran late.
			start := time.Now()
			if tt.release > 0 {
				time.AfterFunc(tt.release, func() {
					for _, c := range held {
						c.Close()
					}
				})
			}
			if tt.during > 0 {
				time.AfterFunc(tt.during, func() { h.s.Complete(context.Background(), control.Completion{Peer: "app", Code: 0}) })
			}

			type result struct {
				ok  bool
				why string
			}
			res := make(chan result, 1)
			go func() {
				ok, why := h.s.Drain(context.Background())
				res <- result{ok, why}
			}()
			h.eventually("the drain started", func() bool { return h.status().Draining })
			if s := h.status(); s.State != "draining" {
				t.Errorf("state %q during the drain, want draining", s.State)
			}
			// The kubelet takes the pod out of the endpoints; the app's own
			// readiness question still says yes, as outbound traffic flows.
			if code := httpStatus(t, readyURL); code != 503 {
				t.Errorf("/healthz/ready during the drain: %d, want 503", code)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			ok, why := h.s.WaitReady(ctx)
			cancel()
			if !ok {
				t.Errorf("WaitReady during the drain: not ready (%s); want ready", why)
			}

			var r result
			select {
			case r = <-res:
			case <-time.After(5 * time.Second):
				t.Fatal("the drain did not end")
			}
			took := time.Since(start)
			if r.ok != tt.ok || r.why != tt.why {
				t.Errorf("Drain = %v, %q; want %v, %q", r.ok, r.why, tt.ok, tt.why)
			}
			if took < tt.atLeast || took > tt.atMost {
				t.Errorf("the drain took %v; want %v to %v", took, tt.atLeast, tt.atMost)
			}
			if h.logged("admin /drain_listeners failed") {
				t.Error("/drain_listeners was not accepted")
			}
			// A drain does not stop the proxy; SIGTERM then stops it at
			// once, without a second drain.
			h.running(notEnded / 2)
			h.signal(syscall.SIGTERM)
			if code := h.wait(5 * time.Second); code != 0 {
				t.Fatalf("Run = %d after SIGTERM, want 0", code)
			}
			if n := h.countLogged("drain started"); n != 1 {
				t.Errorf("%d drains started, want 1", n)
			}
		})
	}
}

// preStop and SIGTERM share one drain; a request that waits less than the
// drain is told so, and the drain goes on.
func TestDrainSharedAndBoundedWait(t *testing.T) {
	h := startSupervisor(t, nil)
	h.waitReady()
	ln := h.listenApp()

	ok, why, err := h.client.Drain(t.Context(), 100*time.Millisecond)
	if err != nil {
		t.Fatalf("POST /v1/drain: %v", err)
	}
	if ok || !strings.Contains(why, control.StillDraining) {
		t.Fatalf("POST /v1/drain?wait=100ms = %v, %q; want not drained yet", ok, why)
	}
	h.signal(syscall.SIGTERM)
	h.eventually("SIGTERM joined the drain", func() bool { return h.logged("drain already started", "trigger", "SIGTERM") })
	h.running(notEnded)

	// In-process: the socket closes once the proxy has exited (see
	// TestFinalAnswersAreDelivered).
	done := make(chan bool, 1)
	go func() {
		ok, _ := h.s.Drain(context.Background())
		done <- ok
	}()
	ln.Close()
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want 0", code)
	}
	select {
	case ok := <-done:
		if !ok {
			t.Error("the waiting preStop was not told the drain succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Error("the waiting preStop got no answer")
	}
}

// A SIGTERM that comes after a preStop's drain ended checks Envoy's
// connections again: one the app opened since holds the stop until it
// closes, within what is left of the bound.
func TestSigtermAfterAnEndedDrainChecksAgain(t *testing.T) {
	envoyPort := proctest.FreePort(t)
	h := startSupervisor(t, func(h *harness, c *Config) { c.DrainTimeout = 20 * time.Second },
		"--listener", fmt.Sprintf("in=127.0.0.1:%d,inbound,tcp", envoyPort))
	h.waitReady()
	if ok, why := h.s.Drain(context.Background()); !ok {
		t.Fatalf("preStop drain: %s", why)
	}
	c := busyConnection(t, envoyPort)
	defer c.Close()
	h.signal(syscall.SIGTERM)
	h.eventually("SIGTERM re-checked the drain", func() bool { return h.logged("drain re-checked") })
	h.running(notEnded)
	c.Close()
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want 0", code)
	}
}

// A leader (pilot-agent) that exits by itself once the preStop's drain has
// ended is not in the middle of a drain: its group is killed at once, and
// the preStop's 0 stands. Held as if mid-drain, it waited for a drain end
// that had come already, until the kubelet's SIGTERM, and its code
// replaced the 0.
func TestLeaderExitAfterTheDrainEnded(t *testing.T) {
	exit := filepath.Join(t.TempDir(), "exit")
	h := startSupervisor(t, func(h *harness, c *Config) {
		leader := fmt.Sprintf(`"$0" "$@" >>'%s' 2>&1 & while [ ! -e '%s' ]; do sleep 0.05; done; exit 2`, h.envoyLog, exit)
		c.Command = append([]string{"/bin/sh", "-c", leader}, c.Command[3:]...)
	})
	h.waitReady()
	ok, why, err := h.client.Drain(t.Context(), 5*time.Second)
	if err != nil || !ok {
		t.Fatalf("POST /v1/drain: %v, %q, %v; want drained", ok, why, err)
	}
	if err := os.WriteFile(exit, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := h.wait(5 * time.Second); code != 0 {
		t.Fatalf("Run = %d, want the preStop's 0", code)
	}
	if h.logged("the proxy's leader exited by itself in the middle of the drain") {
		t.Error("a leader's exit after the drain's end was taken as mid-drain")
	}
}

// busyConnection opens a connection through the fake Envoy's listener on
// envoyPort and has it echo one byte, so that Envoy counts it busy: what
// holds a drain.
func busyConnection(t *testing.T, envoyPort uint16) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", envoyPort))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		c.Close()
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		c.Close()
		t.Fatalf("echo through the fake Envoy: %v", err)
	}
	return c
}
