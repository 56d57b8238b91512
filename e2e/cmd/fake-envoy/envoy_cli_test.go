package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// pilotAgentArgs is the command line pilot-agent gives Envoy (Istio 1.25 on
// adds --skip-deprecated-logs), with --file-flush-min-size-kb, which newer
// agents pass too.
var pilotAgentArgs = []string{
	"-c", "etc/istio/proxy/envoy-rev.json", "--drain-time-s", "45", "--drain-strategy", "immediate",
	"--local-address-ip-version", "v4", "--file-flush-interval-msec", "1000", "--disable-hot-restart",
	"--allow-unknown-static-fields", "-l", "warning", "--component-log-level", "misc:error",
	"--skip-deprecated-logs", "--file-flush-min-size-kb", "64",
}

// The fake runs under a real pilot-agent: every flag it passes is taken.
func TestPilotAgentCommandLine(t *testing.T) {
	t.Parallel()
	p := start(t, pilotAgentArgs...)
	admin := p.live()
	_, body, err := get(admin, "GET", "/server_info", 2*time.Second)
	if err != nil || !strings.Contains(body, `"drain_time": "45s"`) || !strings.Contains(body, `"config_path": "etc/istio/proxy/envoy-rev.json"`) {
		t.Fatalf("/server_info %v:\n%s", err, body)
	}
}

// Under pilot-agent the fake's command line is pilot-agent's: its fixture
// flags come from FAKE_ENVOY_FLAGS, which pilot-agent passes on with the rest
// of its environment.
func TestFixtureFlagsFromEnvironment(t *testing.T) {
	t.Parallel()
	dir := configDir(t)
	cmd := exec.Command(build(t), pilotAgentArgs...)
	cmd.Env = append(os.Environ(), "FAKE_ENVOY_FLAGS=--admin-addr 127.0.0.1:0 --listener inbound=127.0.0.1:0,inbound"+
		" --admin-address-path "+filepath.Join(dir, "admin")+" --ready-file "+filepath.Join(dir, "ready"))
	addr := startIn(t, dir, cmd).listener("inbound")
	if code, _, err := get(addr, "GET", "/hello", 2*time.Second); err != nil || code != 200 {
		t.Fatalf("GET %s/hello: %d %v", addr, code, err)
	}
}

// validate runs the fake with --mode validate (unless args set a mode),
// which, as Envoy's, parses the command line and exits without serving.
func validate(t *testing.T, args ...string) (int, string) {
	t.Helper()
	if !slices.Contains(args, "--mode") {
		args = append([]string{"--mode", "validate"}, args...)
	}
	cmd := exec.Command(build(t), args...)
	cmd.Dir = configDir(t)
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

// Every option on Envoy's "Command line options" page is taken, with
// Envoy's value syntax.
func TestEnvoyOptionsAccepted(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		pilotAgentArgs,
		{"--config-path", "etc/envoy.yaml", "--config-yaml", "node: {id: a}"},
		{"--admin-address-path", t.TempDir() + "/admin", "--local-address-ip-version", "v6"},
		{"--base-id", "7", "--base-id-path", "/tmp/base-id"},
		{"--use-dynamic-base-id", "--skip-hot-restart-on-no-parent", "--skip-hot-restart-parent-stats"},
		{"--concurrency", "0", "--cpuset-threads"},
		{"--log-level", "trace", "--log-format", "[%Y] %v", "--log-format-escaped", "--enable-fine-grain-logging", "--log-path", "/dev/null"},
		{"-l", "warn", "--component-log-level", "upstream:debug,connection:trace,misc:off"},
		{"--restart-epoch", "0", "--service-cluster", "c", "--service-node", "n", "--service-zone", "z"},
		{"--drain-time-s", "010", "--drain-strategy", "gradual", "--parent-shutdown-time-s", "+900"},
		{"--enable-mutex-tracing", "--allow-unknown-fields", "--reject-unknown-dynamic-fields", "--ignore-unknown-dynamic-fields"},
		{"--disable-extensions", "envoy.a/b", "--socket-path", "/tmp/envoy.sock", "--socket-mode", "644", "--enable-core-dump"},
		{"--stats-tag", "cluster_name:blue", "--stats-tag", "zone:us-east-1a"},
		{"--drain-time-s", "-1"}, // a C++ stream wraps it around, as Envoy's does
		{"-c", "etc/envoy.yaml", "--", "--anything", "goes"},
	} {
		if code, out := validate(t, args...); code != 0 || !strings.Contains(out, "OK") {
			t.Errorf("%q: exit %d, want 0:\n%s", args, code, out)
		}
	}
	for _, args := range [][]string{{"--version"}, {"--hot-restart-version"}, {"-h"}} {
		cmd := exec.Command(build(t), args...)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) == 0 {
			t.Errorf("%q: %v, want exit 0 with output:\n%s", args, err, out)
		}
	}
}

// What Envoy refuses, the fake refuses, with exit 1.
func TestEnvoyOptionsRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		out  string
	}{
		{[]string{"--drain-time-s=45"}, "Couldn't find match for argument"},
		{[]string{"-drain-time-s", "45"}, "Couldn't find match for argument"},
		{[]string{"--skip-deprecated-logs=true"}, "Couldn't find match for argument"},
		{[]string{"--no-such-option"}, "Couldn't find match for argument"},
		{[]string{"-x"}, "Couldn't find match for argument"},
		{[]string{"--drain-time-s", "0x10"}, "Couldn't read argument value from string '0x10'"},
		{[]string{"--drain-time-s", "45s"}, "Couldn't read argument value"},
		{[]string{"--drain-time-s", "4294967296"}, "Couldn't read argument value"},
		{[]string{"--concurrency", "2 3"}, "More than one valid value"},
		{[]string{"--drain-time-s"}, "Missing a value for this argument!"},
		{[]string{"--concurrency", "2", "--concurrency", "3"}, "Argument already set!"},
		{[]string{"--disable-hot-restart", "--disable-hot-restart"}, "Argument already set!"},
		{[]string{"--local-address-ip-version", "v5"}, "error: unknown IP address version 'v5'"},
		{[]string{"--mode", "serve2"}, "error: unknown mode 'serve2'"},
		{[]string{"-l", "loud"}, "error: invalid log level specified 'loud'"},
		{[]string{"--component-log-level", "misc"}, "error: component log level not correctly specified 'misc'"},
		{[]string{"--component-log-level", "misc:loud"}, "error: invalid log level specified 'loud'"},
		{[]string{"--stats-tag", "nocolon"}, "error: misformatted stats-tag 'nocolon'"},
		{[]string{"--stats-tag", "a-b:c"}, "contains invalid char in 'a-b'"},
		{[]string{"--stats-tag", "a:b.c"}, "contains invalid char in 'b.c'"},
		{[]string{"--socket-path", "/tmp/s", "--socket-mode", "9"}, "error: invalid socket-mode '9'"},
		{[]string{"--use-dynamic-base-id", "--restart-epoch", "1"}, "error: cannot use --restart-epoch=1 with --use-dynamic-base-id"},
		{[]string{"--drain-strategy", "slow"}, "error: unknown drain-strategy 'slow'"},
	} {
		if code, out := validate(t, tt.args...); code != 1 || !strings.Contains(out, tt.out) {
			t.Errorf("%q: exit %d, want 1 with %q:\n%s", tt.args, code, tt.out, out)
		}
	}
}

// A fatal signal from outside kills the fake as it kills Envoy, whose crash
// handler logs a backtrace and re-raises: death by that signal (139 for
// SEGV, 134 for ABRT), before and after init, never Go's exit 2 with a
// goroutine dump.
func TestFatalSignalsDieLikeEnvoy(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{unix.SIGSEGV, unix.SIGABRT, unix.SIGBUS, unix.SIGILL, unix.SIGFPE} {
		for _, live := range []bool{false, true} {
			p := start(t, "--stay-initializing")
			if live {
				p = start(t)
				p.live()
			} else {
				p.bound()
			}
			p.signal(sig)
			ws := p.exited(5 * time.Second)
			out := p.stderr.String()
			if !ws.Signaled() || ws.Signal() != sig {
				t.Errorf("%v (live %v): status %v, want death by %v", sig, live, ws, sig)
			}
			if !strings.Contains(out, "[critical][main] Caught "+signalDescription(sig)) || !strings.Contains(out, "Backtrace") || strings.Contains(out, "goroutine ") {
				t.Errorf("%v (live %v): want Envoy's crash log and no goroutine dump:\n%s", sig, live, out)
			}
		}
	}
}

// Signals whose default action ends Envoy, and which Go's runtime would
// ignore or answer with a goroutine dump and exit 2, kill the fake by that
// signal.
func TestDefaultActionSignalsKill(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{unix.SIGQUIT, unix.SIGTRAP, unix.SIGSYS, unix.SIGALRM, unix.SIGXCPU, unix.SIGPWR, unix.SIGUSR2} {
		p := start(t)
		p.live()
		p.signal(sig)
		ws := p.exited(5 * time.Second)
		if !ws.Signaled() || ws.Signal() != sig || strings.Contains(p.stderr.String(), "goroutine ") {
			t.Errorf("%v: status %v, want death by it:\n%s", sig, ws, p.stderr.String())
		}
	}
}

// Exit codes are decimal everywhere, the fixture's --exit-code too.
func TestFixtureExitCodeIsDecimal(t *testing.T) {
	t.Parallel()
	p := start(t, "--exit-after", "1ms", "--exit-code", "010")
	if ws := p.exited(5 * time.Second); !ws.Exited() || ws.ExitStatus() != 10 {
		t.Fatalf("status %v, want exit 10", ws)
	}
	if code, out := validate(t, "--exit-code", "0x10"); code != 1 {
		t.Fatalf("--exit-code 0x10: exit %d, want 1:\n%s", code, out)
	}
}

// The bootstrap on the command line: -c's file (JSON here) and
// --config-yaml, merged; the listener forwards to the app behind it, and
// traffic_direction INBOUND is what /drain_listeners?inboundonly goes by.
func TestBootstrapListenersForward(t *testing.T) {
	t.Parallel()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app "+r.URL.Path) }))
	t.Cleanup(app.Close)
	host, port, _ := net.SplitHostPort(app.Listener.Addr().String())
	dir := configDir(t)
	cluster := `{"static_resources": {"clusters": [{"name": "app", "load_assignment": {"cluster_name": "app", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "` + host + `", "port_value": ` + port + `}}}}]}]}}]}}`
	if err := os.WriteFile(filepath.Join(dir, "clusters.json"), []byte(cluster), 0o644); err != nil {
		t.Fatal(err)
	}
	listener := `
static_resources:
  listeners:
  - name: inbound
    traffic_direction: INBOUND
    address: {socket_address: {address: 127.0.0.1, port_value: 0}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: inbound
          route_config: {virtual_hosts: [{name: app, domains: ["*"], routes: [{match: {prefix: /}, route: {cluster: app}}]}]}
`
	cmd := exec.Command(build(t), "-c", "clusters.json", "--config-yaml", listener, "--admin-addr", "127.0.0.1:0",
		"--admin-address-path", filepath.Join(dir, "admin"), "--ready-file", filepath.Join(dir, "ready"))
	addr := startIn(t, dir, cmd).listener("inbound")
	if code, body, err := get(addr, "GET", "/hello", 2*time.Second); err != nil || code != 200 || body != "app /hello" {
		t.Fatalf("through the inbound listener: %d %q %v", code, body, err)
	}
	if code, out := validate(t, "--config-yaml", "static_resources: {listeners: [{name: x, address: {socket_address: {address: 127.0.0.1, port_value: 1}}, filter_chains: [{filters: [{name: envoy.filters.network.redis_proxy, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy}}]}]}]}"); code != 1 || !strings.Contains(out, "redis_proxy") {
		t.Errorf("a listener the fake cannot run: exit %d:\n%s", code, out)
	}
	if code, out := validate(t, "-c", "missing.yaml"); code != 1 || !strings.Contains(out, "Invalid path: missing.yaml") {
		t.Errorf("a missing -c file: exit %d:\n%s", code, out)
	}
}

// startIn runs cmd, whose admin address and ready files are in dir, in dir.
func startIn(t *testing.T, dir string, cmd *exec.Cmd) *proc {
	t.Helper()
	cmd.Dir = dir
	p := &proc{t: t, dir: dir}
	p.Proc = proctest.Start(t, "fake-envoy", cmd)
	p.stderr = p.Out
	return p
}

// listener waits until the fake is live and returns the address of its
// listener name, as /listeners tells it.
func (p *proc) listener(name string) string {
	p.t.Helper()
	_, body, err := get(p.live(), "GET", "/listeners", 2*time.Second)
	for line := range strings.Lines(body) {
		if n, addr, ok := strings.Cut(strings.TrimSpace(line), "::"); ok && n == name {
			return addr
		}
	}
	p.t.Fatalf("/listeners %v: %q, want %s", err, body, name)
	return ""
}

// --fake-version picks the release: --version and /server_info say it.
func TestFakeVersion(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]string{"1.31.4": "/1.31.4/", "next": "/1.41.0-dev/", "1.34.0-dev": "/1.34.0-dev/"} {
		out, err := exec.Command(build(t), "--version", "--fake-version", v).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want+"Clean/RELEASE/BoringSSL") {
			t.Errorf("--version --fake-version %s: %v:\n%s", v, err, out)
		}
	}
	if code, out := validate(t, "--fake-version", "2.0"); code != 1 || !strings.Contains(out, "want 1.MINOR") {
		t.Errorf("--fake-version 2.0: exit %d:\n%s", code, out)
	}
	_, body, err := get(start(t, "--fake-version", "1.40").live(), "GET", "/server_info", 2*time.Second)
	if err != nil || !strings.Contains(body, "/1.40.0/") {
		t.Errorf("/server_info %v:\n%s", err, body)
	}
}
