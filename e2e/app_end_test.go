package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// outbound is an HTTP listener of the fake Envoy that the drain leaves
// accepting (it drains inbound listeners only): the way out for the app's
// uploads.
const outbound = "outbound=127.0.0.1:9001"

type uploaded struct {
	code int
	err  error
	sent time.Time // the body's last byte written: the request still in flight
	at   time.Time // its answer read
}

// upload starts a POST through Envoy's outbound listener whose body takes d
// to send, as an app uploading its logs, and returns its result's channel.
func (p *pod) upload(d time.Duration) <-chan uploaded {
	out := make(chan uploaded, 1)
	go func() {
		code, sent, err := p.post(d)
		out <- uploaded{code, err, sent, time.Now()}
	}()
	return out
}

// envoyStat waits until the fake Envoy's stat (a gauge) reads n.
func (p *pod) envoyStat(stat string, n int) {
	p.t.Helper()
	proctest.Eventually(p.t, soon, fmt.Sprintf("Envoy's %s at %d", stat, n), func() bool {
		_, body := p.get("http://127.0.0.1:15000/stats?filter=" + stat)
		return strings.Contains(body, fmt.Sprintf("%s: %d\n", stat, n))
	})
}

func (p *pod) post(d time.Duration) (code int, sent time.Time, err error) {
	c, err := p.netns.Dial(context.Background(), "tcp", "127.0.0.1:9001")
	if err != nil {
		return 0, sent, err
	}
	defer c.Close()
	const chunks = 10
	c.SetDeadline(time.Now().Add(d + 10*time.Second))
	if _, err := fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: s3\r\nContent-Length: %d\r\n\r\n", chunks); err != nil {
		return 0, sent, err
	}
	for range chunks {
		time.Sleep(d / chunks) // the upload's pace
		if _, err := c.Write([]byte("x")); err != nil {
			return 0, sent, fmt.Errorf("upload cut: %w", err)
		}
	}
	sent = time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, sent, fmt.Errorf("upload's answer: %w", err)
	}
	resp.Body.Close()
	return resp.StatusCode, sent, nil
}

func (u uploaded) check(t *testing.T) {
	t.Helper()
	if u.err != nil || u.code != 200 {
		t.Fatalf("the upload after the app closed its listener: %d, %v; want 200", u.code, u.err)
	}
}

// outlives asserts that sup exits 0, and only after the upload's end.
func outlives(t *testing.T, sup *proctest.Proc, up <-chan uploaded) {
	t.Helper()
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d", code)
	}
	exited := sup.Ended()
	u := <-up
	u.check(t)
	// Against the body's end, not the answer's read here: the proxy may
	// go once Envoy has answered, before this goroutine reads it.
	if exited.Before(u.sent) {
		t.Fatalf("the proxy exited %v before the upload's body was sent", u.sent.Sub(exited))
	}
}

// An app without exec closes its listener on SIGTERM and opens its upload
// through the proxy a moment later: the drain's quiet period sees it, and
// the proxy stays until the upload is done.
func TestUploadAfterCloseWithoutExec(t *testing.T) {
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "20s"}, "--listener", outbound)
	p.waitHTTP(readyURL, 200, soon)
	ln := p.listen("tcp", "127.0.0.1:8080")
	sup.Signal(syscall.SIGTERM)
	sup.WaitLog(`msg="drain started"`, soon)
	ln.Close()
	time.Sleep(100 * time.Millisecond) // the app's gap between its close and its upload
	up := p.upload(1500 * time.Millisecond)
	outlives(t, sup, up)
}

// An app under exec is known to run until its record is final: it holds
// the drain however long it waits before its upload.
func TestUploadAfterCloseUnderExec(t *testing.T) {
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "20s"}, "--listener", outbound)
	ln := p.listen("tcp", "127.0.0.1:8080")
	app := p.app("app", nil, "sleep 3; exit 0")
	sup.WaitLog(`msg="peer running"`, soon)
	p.waitHTTP(readyURL, 200, soon)
	sup.Signal(syscall.SIGTERM)
	sup.WaitLog(`msg="drain started"`, soon)
	ln.Close()
	time.Sleep(time.Second) // longer than any quiet period
	up := p.upload(500 * time.Millisecond)
	u := <-up
	u.check(t)
	if code := app.Exit(soon); code != 0 {
		t.Fatalf("app exit %d", code)
	}
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d", code)
	}
	if !strings.Contains(sup.Out.String(), "peers_running=1") {
		t.Error("the drain's progress never said a peer was still running")
	}
}

// An idle keep-alive connection (a request served, none in flight) does not
// hold the drain to its bound: Envoy's drain would leave it open for an hour.
func TestIdleKeepAliveDoesNotHoldTheDrain(t *testing.T) {
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "20s"},
		"--listener", "inbound=127.0.0.1:9000,inbound")
	p.waitHTTP(readyURL, 200, soon)
	c, err := p.netns.Dial(context.Background(), "tcp", "127.0.0.1:9000")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: app\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.Close {
		t.Fatalf("keep-alive request: %v, close %v", err, resp != nil && resp.Close)
	}
	resp.Body.Close()
	start := time.Now()
	hook := p.prestop()
	if code := hook.Exit(soon); code != 0 {
		t.Fatalf("prestop exit %d:\n%s", code, hook.Out.String())
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("prestop took %v; an idle keep-alive held it", d)
	}
	// The hook's answer can come before the supervisor's log line is read.
	sup.WaitLog("end=drained", soon)
	deleted(t, sup)
}

// A SIGTERM that comes after the preStop's drain ended checks Envoy's
// connections again: an upload the app started since keeps the proxy.
func TestSigtermAfterPrestopWaitsForTheUpload(t *testing.T) {
	p := newPod(t)
	sup := p.supervise([]string{"--drain-min", "0s", "--drain-timeout", "20s"}, "--listener", outbound)
	p.waitHTTP(readyURL, 200, soon)
	if code := p.prestop().Exit(soon); code != 0 {
		t.Fatal("prestop failed")
	}
	up := p.upload(1500 * time.Millisecond)
	p.envoyStat("http.outbound.downstream_rq_active", 1) // the upload is under way
	sup.Signal(syscall.SIGTERM)
	outlives(t, sup, up)
}
