package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
)

// socketHTTP is a client of the control socket in dir, one connection a
// request.
func socketHTTP(dir string) *http.Client {
	sock := control.SocketPath(dir)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
}

// A state that holds is answered as such, every time (issue 38, 4). GET
// /v1/ready without a wait answered 503 "proxy ready, not yet noted" to a
// proxy ready for seconds in 16 to 25 of 40 requests, and POST
// /v1/drain?wait=0s after the drain's end 504 still-draining in 15 to 23
// of 40: the server's select found both the state's channel and the ended
// wait ready, and picked one at random.
func TestAnEndedWaitAnswersAStateThatHolds(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s"})
	p.waitHTTP(readyURL, 200, soon)
	c := socketHTTP(p.dir)
	ask := func(method, target string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://localhost"+target, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, target, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	for i := range 40 {
		if code, body := ask("GET", "/v1/ready"); code != 200 {
			t.Fatalf("GET /v1/ready, request %d of 40 to a ready proxy: %d %s", i+1, code, body)
		}
	}
	if code, body := ask("POST", "/v1/drain?wait=5s"); code != 200 {
		t.Fatalf("POST /v1/drain?wait=5s: %d %s; want the drain's end", code, body)
	}
	for i := range 40 {
		if code, body := ask("POST", "/v1/drain?wait=0s"); code != 200 || !strings.Contains(body, `"reason":"drained"`) {
			t.Fatalf("POST /v1/drain?wait=0s, request %d of 40 after the drain's end: %d %s", i+1, code, body)
		}
	}
	sup.Signal(syscall.SIGTERM)
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d, want 0", code)
	}
}
