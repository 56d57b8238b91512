package fakeenvoy

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRoutingIsExactPathWithQueryStripped(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{})
	tests := []struct {
		target string
		code   int
		body   string // exact, or a prefix when it ends with "…"
	}{
		{"/ready", 200, "LIVE\n"},
		{"/ready?x=1&y", 200, "LIVE\n"},
		{"/ready?", 200, "LIVE\n"},
		{"/ready/", 404, "invalid path. admin commands are:\n…"},
		{"/READY", 404, "invalid path. admin commands are:\n…"},
		{"/ready%20", 404, "invalid path. admin commands are:\n…"},
		{"//ready", 404, "invalid path. admin commands are:\n…"},
		{"/stats/", 404, "invalid path. admin commands are:\n…"},
		{"/nope?ready", 404, "invalid path. admin commands are:\n…"},
		{"/help", 200, "admin commands are:\n…"},
		{"/hot_restart_version", 200, "11.104"},
		{"/", 200, "<!DOCTYPE html>…"},
	}
	for _, tt := range tests {
		a := call(t, e, "GET", tt.target)
		if a.code != tt.code {
			t.Errorf("GET %s: status %d, want %d", tt.target, a.code, tt.code)
		}
		if prefix, ok := strings.CutSuffix(tt.body, "…"); ok {
			if !strings.HasPrefix(a.body, prefix) {
				t.Errorf("GET %s: body %q, want prefix %q", tt.target, a.body, prefix)
			}
		} else if a.body != tt.body {
			t.Errorf("GET %s: body %q, want %q", tt.target, a.body, tt.body)
		}
	}
}

func TestNotFoundListsCommandsLikeHelp(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{})
	help := call(t, e, "GET", "/help").body
	nf := call(t, e, "GET", "/no/such/path")
	if nf.code != 404 {
		t.Fatalf("status %d", nf.code)
	}
	if nf.body != "invalid path. "+help {
		t.Fatalf("404 body is not \"invalid path. \" + /help:\n%s", nf.body)
	}
	for _, line := range []string{
		"  /ready: print server state, return 200 if LIVE, otherwise return 503\n",
		"  /quitquitquit (POST): exit the server\n",
		"  /healthcheck/fail (POST): cause the server to fail health checks\n",
		"  /drain_listeners (POST): drain listeners\n",
		"      inboundonly: Drains all inbound listeners.",
		"  /stats: print server stats\n",
		"      format: Format to use; One of (html, active-html, text, json)\n",
		"  /listeners: print listener info\n",
	} {
		if !strings.Contains(help, line) {
			t.Errorf("help lacks %q", line)
		}
	}
	var paths []string
	for _, m := range regexp.MustCompile(`(?m)^  (/[^\s:]*)`).FindAllStringSubmatch(help, -1) {
		paths = append(paths, m[1])
	}
	if !slices.IsSorted(paths) || len(paths) < 15 {
		t.Errorf("commands not listed in path order: %v", paths)
	}
}

func TestMutatingEndpointsTakePostOnly(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{})
	paths := []string{"/quitquitquit", "/healthcheck/fail", "/healthcheck/ok", "/drain_listeners",
		"/reopen_logs", "/logging", "/reset_counters"}
	for _, path := range paths {
		for _, method := range []string{"GET", "PUT", "DELETE", "HEAD"} {
			a := call(t, e, method, path+"?graceful")
			if a.code != 405 {
				t.Errorf("%s %s: status %d, want 405", method, path, a.code)
			}
			want := "Method " + method + " not allowed, POST required."
			if method == "HEAD" {
				want = ""
			}
			if a.body != want {
				t.Errorf("%s %s: body %q, want %q", method, path, a.body, want)
			}
		}
	}
	// None of them acted.
	if a := call(t, e, "GET", "/ready"); a.code != 200 || a.body != "LIVE\n" {
		t.Errorf("/ready after refused mutations: %d %q", a.code, a.body)
	}
	select {
	case <-e.Quit():
		t.Error("GET /quitquitquit quit")
	default:
	}
	if refused(e.AdminAddr()) {
		t.Error("admin went away after GET /quitquitquit")
	}
}

func TestAdminHeaders(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{})
	tests := []struct {
		method, target, contentType string
	}{
		{"GET", "/ready", "text/plain; charset=UTF-8"},
		{"GET", "/stats", "text/plain; charset=UTF-8"},
		{"GET", "/stats?format=json", "application/json"},
		{"GET", "/listeners", "text/plain; charset=UTF-8"},
		{"GET", "/listeners?format=json", "application/json"},
		{"GET", "/server_info", "application/json"},
		{"GET", "/nope", "text/plain; charset=UTF-8"},
		{"GET", "/quitquitquit", "text/plain; charset=UTF-8"},
		{"POST", "/healthcheck/ok", "text/plain; charset=UTF-8"},
	}
	for _, tt := range tests {
		a := call(t, e, tt.method, tt.target)
		for name, want := range map[string]string{
			"Content-Type":           tt.contentType,
			"Cache-Control":          "no-cache, max-age=0",
			"X-Content-Type-Options": "nosniff",
			"Server":                 "envoy",
		} {
			if got := a.header.Values(name); len(got) != 1 || got[0] != want {
				t.Errorf("%s %s: %s = %q, want %q", tt.method, tt.target, name, got, want)
			}
		}
		if !slices.Equal(a.resp.TransferEncoding, []string{"chunked"}) {
			t.Errorf("%s %s: transfer encoding %q, want chunked like Envoy", tt.method, tt.target, a.resp.TransferEncoding)
		}
	}
}

func TestReadyStaysLiveThroughDrainListeners(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{Listeners: []Listener{{Name: "in", Addr: "127.0.0.1:0", Inbound: true}}})
	steps := []struct {
		method, target, answer string
		code                   int
		ready                  string
	}{
		{"POST", "/drain_listeners?inboundonly&graceful", "OK\n", 200, "LIVE"},
		{"POST", "/drain_listeners", "OK\n", 200, "LIVE"},
		{"POST", "/healthcheck/fail", "OK\n", 200, "DRAINING"},
		{"POST", "/healthcheck/fail", "OK\n", 200, "DRAINING"},
		{"POST", "/healthcheck/ok", "OK\n", 200, "LIVE"},
	}
	for _, s := range steps {
		if a := call(t, e, s.method, s.target); a.code != s.code || a.body != s.answer {
			t.Fatalf("%s %s: %d %q", s.method, s.target, a.code, a.body)
		}
		code := 200
		if s.ready != "LIVE" {
			code = 503
		}
		if a := call(t, e, "GET", "/ready"); a.code != code || a.body != s.ready+"\n" {
			t.Errorf("after %s: /ready %d %q, want %d %q", s.target, a.code, a.body, code, s.ready+"\n")
		}
		var info struct{ State string }
		if err := json.Unmarshal([]byte(call(t, e, "GET", "/server_info").body), &info); err != nil {
			t.Fatal(err)
		}
		if info.State != s.ready {
			t.Errorf("after %s: /server_info state %q, want %q", s.target, info.State, s.ready)
		}
		if got := e.State().String(); got != s.ready {
			t.Errorf("after %s: State() %s", s.target, got)
		}
	}
}

func TestQuitQuitQuitShutsDown(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{Listeners: []Listener{{Addr: "127.0.0.1:0"}}})
	listener := e.ListenerAddrs()[0].String()
	began := time.Now()
	if a := call(t, e, "POST", "/quitquitquit"); a.code != 200 || a.body != "OK\n" {
		t.Fatalf("quitquitquit: %d %q", a.code, a.body)
	}
	select {
	case <-e.Quit():
	default:
		t.Fatal("Quit not closed once the answer arrived")
	}
	select {
	case <-e.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("not shut down")
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("shutdown took %v; Envoy exits within milliseconds", took)
	}
	if !refused(e.AdminAddr()) || !refused(listener) {
		t.Error("ports still open after /quitquitquit")
	}
}

func TestHangOnQuitAcknowledgesOnly(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{HangOnQuit: true})
	if a := call(t, e, "POST", "/quitquitquit"); a.code != 200 || a.body != "OK\n" {
		t.Fatalf("quitquitquit: %d %q", a.code, a.body)
	}
	<-e.Quit()
	time.Sleep(100 * time.Millisecond)
	if a := call(t, e, "GET", "/ready"); a.code != 200 {
		t.Errorf("/ready after a hung quit: %d", a.code)
	}
}

func TestServerInfo(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{DrainTime: 45 * time.Second, DrainStrategy: "immediate", ConfigPath: "/etc/envoy.yaml"})
	a := call(t, e, "GET", "/server_info")
	if !strings.HasPrefix(a.body, "{\n \"version\": \""+DefaultVersion.Build()+"\",\n \"state\": \"LIVE\",\n \"uptime_current_epoch\": \"") {
		t.Errorf("not Envoy's layout:\n%s", a.body)
	}
	var info struct {
		Version            string
		State              string
		UptimeCurrentEpoch string `json:"uptime_current_epoch"`
		CommandLineOptions struct {
			DrainTime     string `json:"drain_time"`
			DrainStrategy string `json:"drain_strategy"`
			ConfigPath    string `json:"config_path"`
			Concurrency   int
		} `json:"command_line_options"`
	}
	if err := json.Unmarshal([]byte(a.body), &info); err != nil {
		t.Fatal(err)
	}
	clo := info.CommandLineOptions
	if clo.DrainTime != "45s" || clo.DrainStrategy != "Immediate" || clo.ConfigPath != "/etc/envoy.yaml" || clo.Concurrency != 2 {
		t.Errorf("command_line_options: %+v", clo)
	}
	if !regexp.MustCompile(`^\d+s$`).MatchString(info.UptimeCurrentEpoch) {
		t.Errorf("uptime %q is not a proto Duration", info.UptimeCurrentEpoch)
	}
}

func TestLogging(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{})
	a := call(t, e, "POST", "/logging?level=debug")
	if a.code != 200 || !strings.HasPrefix(a.body, "active loggers:\n") || !strings.Contains(a.body, "  admin: debug\n") {
		t.Errorf("level=debug: %d %q", a.code, a.body)
	}
	a = call(t, e, "POST", "/logging?level=loud")
	if a.code != 400 || !strings.HasPrefix(a.body, "error: unknown logger level\n\nusage: ") {
		t.Errorf("level=loud: %d %q", a.code, a.body)
	}
	a = call(t, e, "POST", "/logging?paths=main:error,upstream:trace")
	if a.code != 200 || !strings.Contains(a.body, "  main: error\n") || !strings.Contains(a.body, "  upstream: trace\n") {
		t.Errorf("paths=: %d %q", a.code, a.body)
	}
}

func TestReopenLogs(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	e := startLive(t, Options{Log: logs.logger()})
	if a := call(t, e, "POST", "/reopen_logs"); a.code != 200 || a.body != "OK\n" {
		t.Fatalf("reopen_logs: %d %q", a.code, a.body)
	}
	if !regexp.MustCompile(`(?m)^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\]\[\d+\]\[info\]\[main\] reopening access logs$`).MatchString(logs.String()) {
		t.Errorf("no Envoy-style reopen line in:\n%s", logs.String())
	}
}

func TestResetCounters(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{})
	if got := stats(t, e, "?filter=^cluster_manager.cds.update_success$")["cluster_manager.cds.update_success"]; got != 1 {
		t.Fatalf("update_success %d before reset", got)
	}
	if a := call(t, e, "POST", "/reset_counters"); a.body != "OK\n" {
		t.Fatalf("reset_counters: %q", a.body)
	}
	s := stats(t, e, "?usedonly&filter=^cluster_manager.cds.update_success$")
	if v, ok := s["cluster_manager.cds.update_success"]; !ok || v != 0 {
		t.Errorf("after reset: %v (a reset counter stays used)", s)
	}
}
