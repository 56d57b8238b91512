package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// streamBootstrap is sidecarBootstrap with the inbound connection manager's
// drain_timeout (Envoy's is 5s) short enough that the next release's
// proactive drain has room in a 3 s drain time.
var streamBootstrap = strings.Replace(sidecarBootstrap, "stat_prefix: inbound\n",
	"stat_prefix: inbound\n          drain_timeout: 0.1s\n", 1)

// serveUpgrade runs an app on addr inside the pod that takes a WebSocket
// upgrade and echoes what follows.
func (p *pod) serveUpgrade(addr string) net.Listener {
	p.t.Helper()
	return p.serve(addr, "app", http.HandlerFunc(proctest.EchoUpgrade))
}

// stream is an upgraded stream through the proxy.
type stream struct {
	t *testing.T
	c net.Conn
}

func (p *pod) upgrade(t *testing.T, addr string) *stream {
	t.Helper()
	c := p.dial(t, addr)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: app\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v", resp, err)
	}
	s := &stream{t, c}
	if !s.echoes() {
		t.Fatal("the upgraded stream does not echo")
	}
	return s
}

// echoes reports whether a byte sent comes back.
func (s *stream) echoes() bool {
	s.c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := s.c.Write([]byte{'x'}); err != nil {
		return false
	}
	b := make([]byte, 1)
	_, err := io.ReadFull(s.c, b)
	return err == nil && b[0] == 'x'
}

// cutWithin reports whether the proxy ended the stream within d.
func (s *stream) cutWithin(d time.Duration) bool {
	s.c.SetReadDeadline(time.Now().Add(d))
	_, err := s.c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// A WebSocket stream into the app across the supervisor's preStop drain
// (bound 6 s), per Envoy profile, the app serving all along: 1.40 leaves it
// alone; the next release cuts it in the last third of a 3 s
// --drain-time-s, while the supervisor still waits for the app, and the
// supervisor said so when it read Envoy's drain time; given 9 s, 2/3 of
// which cover the bound, the stream lasts the drain there too.
func TestUpgradedStreamAcrossTheDrain(t *testing.T) {
	t.Parallel()
	const short = `msg="Envoy's --drain-time-s is short for the drain's bound"`
	for _, tt := range []struct {
		version, drainTime string
		cut                bool
		warns              string // a word of the warning; "" for none
	}{
		{"1.40", "3", false, "next release"},
		{"next", "3", true, "2/3 of --drain-time-s"},
		{"next", "9", false, ""},
	} {
		t.Run(tt.version+"/"+tt.drainTime, func(t *testing.T) {
			t.Parallel()
			p := newPod(t)
			// The hints at the drain's start (no --drain-delay): Envoy's
			// drain time counts from them.
			sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "6s", "--drain-delay", "0s", "--app-ports", "8080"},
				"--fake-version", tt.version, "--drain-time-s", tt.drainTime, "--drain-strategy", "immediate",
				"--config-yaml", streamBootstrap)
			app := p.serveUpgrade("127.0.0.1:8080")
			p.waitHTTP(readyURL, 200, soon)
			sup.WaitLog(`msg="drain call chosen"`, soon)
			ws := p.upgrade(t, "127.0.0.1:9000")

			hook := p.prestop()
			sup.WaitLog(`msg="drain started"`, soon)
			// Past the whole 3 s drain time, short of the 6 s bound.
			if got := ws.cutWithin(3500 * time.Millisecond); got != tt.cut {
				t.Errorf("stream cut during the drain = %v, want %v", got, tt.cut)
			}
			if !tt.cut && !ws.echoes() {
				t.Error("the stream no longer echoes")
			}
			if sup.Wait(100 * time.Millisecond) {
				t.Fatal("the supervisor exited while the app listens")
			}
			out := sup.Out.String()
			if warned := strings.Contains(out, short); warned != (tt.warns != "") || !strings.Contains(out, tt.warns) {
				t.Errorf("drain time warning: %v, want one saying %q", warned, tt.warns)
			}

			app.Close()
			ws.c.Close()
			if code := hook.Exit(soon); code != 0 || !strings.Contains(hook.Out.String(), "drained") {
				t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
			}
			deleted(t, sup)
		})
	}
}
