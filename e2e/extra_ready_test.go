package e2e

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// agentReady serves a pilot-agent-like /healthz/ready on 127.0.0.1:15020 in
// the pod, 503 until ok is set.
func (p *pod) agentReady(ok *atomic.Bool) {
	p.t.Helper()
	var ln net.Listener
	if err := p.netns.Do(func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:15020")
		return err
	}); err != nil {
		p.t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ok.Load() {
			http.Error(w, "Envoy proxy is NOT ready: DNS proxy not ready", http.StatusServiceUnavailable)
		}
	})}
	go srv.Serve(ln)
	p.t.Cleanup(func() { srv.Close() })
}

// With --extra-ready-url the proxy is ready only when the URL answers 200
// too: readiness stays 503 and exec holds the app until both agree.
func TestExtraReadyURL(t *testing.T) {
	p := newPod(t)
	var ok atomic.Bool
	p.agentReady(&ok)
	sup := p.supervise([]string{"--drain-min", "0s", "--extra-ready-url", "http://127.0.0.1:15020/healthz/ready"})
	sup.WaitLog("proxy started", soon)
	app := p.app("app", []string{"--timeout", "30s"}, "echo app started; exit 0")
	// 503 at first for the admin API, until the fake Envoy is LIVE (over a
	// second on a busy machine), then for the extra URL alone.
	body := p.waitHTTP(readyURL, 503, soon)
	proctest.Until(soon, func() bool {
		if strings.Contains(body, "DNS proxy not ready") {
			return true
		}
		_, body = p.get(readyURL)
		return false
	})
	if !strings.Contains(body, "15020") || !strings.Contains(body, "DNS proxy not ready") {
		t.Fatalf("readiness 503 without the extra URL's reason: %q", body)
	}
	if app.Wait(time.Second) {
		t.Fatalf("the app ran (exit %d) before the extra readiness URL said ready:\n%s", app.Code(), app.Out.String())
	}
	if strings.Contains(app.Out.String(), "app started") {
		t.Fatal("the app started before the extra readiness URL said ready")
	}
	ok.Store(true)
	if code := app.Exit(soon); code != 0 {
		t.Fatalf("app exit %d:\n%s", code, app.Out.String())
	}
	if code := sup.Exit(soon); code != 0 {
		t.Fatalf("supervisor exit %d", code)
	}
}
