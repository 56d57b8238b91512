package main

import (
	"bytes"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/envoy"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{
		"drain-min":  "PROXY_SUPERVISOR_DRAIN_MIN",
		"admin-url":  "PROXY_SUPERVISOR_ADMIN_URL",
		"name":       "PROXY_SUPERVISOR_NAME",
		"proxy-uid":  "PROXY_SUPERVISOR_PROXY_UID",
		"log-format": "PROXY_SUPERVISOR_LOG_FORMAT",
	} {
		if got := envName(flag); got != want {
			t.Errorf("envName(%q) = %q, want %q", flag, got, want)
		}
	}
}

func TestFlagWinsOverEnv(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want time.Duration
		err  string
	}{
		{"default", nil, nil, 5 * time.Second, ""},
		{"env", nil, map[string]string{"PROXY_SUPERVISOR_DRAIN_MIN": "2s"}, 2 * time.Second, ""},
		{"flag wins", []string{"--drain-min", "1s"}, map[string]string{"PROXY_SUPERVISOR_DRAIN_MIN": "2s"}, time.Second, ""},
		{"bad env", nil, map[string]string{"PROXY_SUPERVISOR_DRAIN_MIN": "x"}, 0, "PROXY_SUPERVISOR_DRAIN_MIN"},
		{"bad flag", []string{"--drain-min", "x"}, nil, 0, "--drain-min"},
		{"unknown flag", []string{"--drain-max", "1s"}, nil, 0, "--drain-max"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFlags("supervise", "", "")
			d := f.fs.Duration("drain-min", 5*time.Second, "")
			_, err := f.parse(tt.args, envOf(tt.env))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one naming %s", err, tt.err)
				}
				return
			}
			if err != nil || *d != tt.want {
				t.Fatalf("got %v, %v; want %v", *d, err, tt.want)
			}
		})
	}
}

// --timeout means a different wait in each command: each reads its own
// variable, and the shared one only as a fallback that says it is going.
func TestPerCommandVariable(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want time.Duration
		warn bool
	}{
		{"default", nil, nil, time.Minute, false},
		{"its own", nil, map[string]string{"PROXY_SUPERVISOR_WAIT_TIMEOUT": "2s"}, 2 * time.Second, false},
		{"another command's", nil, map[string]string{"PROXY_SUPERVISOR_PRESTOP_TIMEOUT": "2s"}, time.Minute, false},
		{"the shared one, said", nil, map[string]string{"PROXY_SUPERVISOR_TIMEOUT": "3s"}, 3 * time.Second, true},
		{"its own over the shared one", nil, map[string]string{"PROXY_SUPERVISOR_WAIT_TIMEOUT": "2s", "PROXY_SUPERVISOR_TIMEOUT": "3s"}, 2 * time.Second, false},
		{"the flag over both", []string{"--timeout", "1s"}, map[string]string{"PROXY_SUPERVISOR_WAIT_TIMEOUT": "2s", "PROXY_SUPERVISOR_TIMEOUT": "3s"}, time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFlags("wait", "", "")
			d := f.fs.Duration("timeout", time.Minute, "")
			if _, err := f.parse(tt.args, envOf(tt.env)); err != nil || *d != tt.want {
				t.Fatalf("got %v, %v; want %v", *d, err, tt.want)
			}
			warned := len(f.warnings) == 1 && strings.Contains(f.warnings[0], "PROXY_SUPERVISOR_TIMEOUT is read as PROXY_SUPERVISOR_WAIT_TIMEOUT")
			if warned != tt.warn || len(f.warnings) > 1 {
				t.Errorf("warnings %q, want one: %v", f.warnings, tt.warn)
			}
		})
	}
	var out, errw bytes.Buffer
	if code := run([]string{"prestop", "--check"}, envOf(map[string]string{"PROXY_SUPERVISOR_TIMEOUT": "x"}), &out, &errw); code != 2 ||
		!strings.Contains(errw.String(), "(from PROXY_SUPERVISOR_TIMEOUT)") || !strings.Contains(errw.String(), "set that instead") {
		t.Errorf("a bad shared value: exit %d, stderr %q; want 2, the variable it came from and the warning", code, errw.String())
	}
}

func TestHelpListsEnvAndDefault(t *testing.T) {
	var out, errw bytes.Buffer
	if code := run([]string{"supervise", "--help"}, envOf(nil), &out, &errw); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"--drain-timeout", "env PROXY_SUPERVISOR_DRAIN_TIMEOUT, default 20s",
		"--admin-url", "env PROXY_SUPERVISOR_ADMIN_URL, default http://127.0.0.1:15000",
		"--native-sidecar", "env PROXY_SUPERVISOR_NATIVE_SIDECAR, default false",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
}

func TestListFlags(t *testing.T) {
	var p portList
	if err := p.Set("8080, 9090"); err != nil || p.String() != "8080,9090" {
		t.Fatalf("ports: %v %v", p, err)
	}
	for _, bad := range []string{"0", "65536", "http"} {
		if err := p.Set(bad); err == nil {
			t.Errorf("port %q accepted", bad)
		}
	}
	var u uidList
	if err := u.Set("1000,1337"); err != nil || u.String() != "1000,1337" {
		t.Fatalf("uids: %v %v", u, err)
	}
	if err := u.Set("-1"); err == nil {
		t.Error("uid -1 accepted")
	}
}

func TestIstioDrainMapping(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want time.Duration
		err  bool
	}{
		{"nothing set", nil, 0, false},
		{"exit on zero with minimum", map[string]string{"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "true", "MINIMUM_DRAIN_DURATION": "8s"}, 8 * time.Second, false},
		{"minimum alone is not read", map[string]string{"MINIMUM_DRAIN_DURATION": "8s"}, 0, false},
		{"termination drain, JSON", map[string]string{"PROXY_CONFIG": `{"terminationDrainDuration":"12s","concurrency":2}`}, 12 * time.Second, false},
		{"termination drain, YAML", map[string]string{"PROXY_CONFIG": "concurrency: 2\nterminationDrainDuration: 15s\n"}, 15 * time.Second, false},
		{"exit on zero ignores termination drain", map[string]string{"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "true", "PROXY_CONFIG": `{"terminationDrainDuration":"12s"}`}, 0, false},
		{"bad minimum", map[string]string{"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "true", "MINIMUM_DRAIN_DURATION": "soon"}, 0, true},
		{"bad termination drain", map[string]string{"PROXY_CONFIG": `{"terminationDrainDuration":"soon"}`}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := istioDrain(envOf(tt.env))
			if (err != nil) != tt.err {
				t.Fatalf("err %v, want error %v", err, tt.err)
			}
			if got.min != tt.want {
				t.Fatalf("min %v, want %v", got.min, tt.want)
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errw bytes.Buffer
	if code := run([]string{"superviseX"}, envOf(nil), &out, &errw); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(errw.String(), "superviseX") {
		t.Fatalf("error does not name the command: %q", errw.String())
	}
}

// Environment values are input from the manifest; parsing never panics and
// either fails cleanly or yields a usable value.
func FuzzEnvValues(f *testing.F) {
	f.Add(`{"terminationDrainDuration":"5s"}`, "8080,9090", "1337")
	f.Add("terminationDrainDuration: 1m\n", ",,", "-1")
	f.Fuzz(func(t *testing.T, proxyConfig, ports, uids string) {
		env := envOf(map[string]string{"PROXY_CONFIG": proxyConfig})
		if s, err := istioDrain(env); err == nil && s.min < 0 {
			t.Fatalf("negative drain minimum %v", s.min)
		}
		var p portList
		if p.Set(ports) == nil {
			for _, v := range p {
				if v == 0 {
					t.Fatal("port 0 accepted")
				}
			}
		}
		var u uidList
		u.Set(uids)
	})
}

// runFor runs the command line in-process, bounded: a flag that is not
// refused may start a supervisor that never returns.
func runFor(t *testing.T, args []string, env map[string]string) (int, string) {
	t.Helper()
	var out, errw bytes.Buffer // read only once run has returned
	done := make(chan int, 1)
	go func() { done <- run(args, envOf(env), &out, &errw) }()
	select {
	case code := <-done:
		return code, errw.String()
	case <-time.After(10 * time.Second):
		t.Fatalf("%q still running after 10s", args)
		return 0, ""
	}
}

// Exit codes are decimal everywhere, as the socket reads them: 010 is 10,
// and 0x10 is refused rather than read as 16.
func TestExitCodeIsDecimal(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want int // the recorded code; -1: refused with exit 2
	}{
		{"leading zero", []string{"--exit-code", "010"}, nil, 10},
		{"leading zero from env", nil, map[string]string{"PROXY_SUPERVISOR_EXIT_CODE": "010"}, 10},
		{"plain", []string{"--exit-code", "255"}, nil, 255},
		{"hex", []string{"--exit-code", "0x10"}, nil, -1},
		{"hex from env", nil, map[string]string{"PROXY_SUPERVISOR_EXIT_CODE": "0x10"}, -1},
		{"octal prefix", []string{"--exit-code", "0o10"}, nil, -1},
		{"binary", []string{"--exit-code", "0b1"}, nil, -1},
		{"underscore", []string{"--exit-code", "1_0"}, nil, -1},
		{"too big", []string{"--exit-code", "256"}, nil, -1},
		{"negative", []string{"--exit-code", "-1"}, nil, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := peers.Open(dir).Create(); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"complete", "--control-dir", dir}, tt.args...)
			code, stderr := runFor(t, args, tt.env)
			if tt.want < 0 {
				if code != 2 || !strings.Contains(stderr, "--exit-code") {
					t.Fatalf("exit %d, want 2 naming --exit-code; stderr:\n%s", code, stderr)
				}
				if _, ok, _ := peers.Open(dir).Get(control.DefaultPeer, nil); ok {
					t.Fatal("a refused code was recorded")
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", code, stderr)
			}
			r, ok, err := peers.Open(dir).Get(control.DefaultPeer, nil)
			if !ok || err != nil || r.ExitCode != tt.want {
				t.Fatalf("record %+v %v %v, want code %d", r, ok, err, tt.want)
			}
		})
	}
}

// Bad addresses and URLs are refused with the flags: exit 2 and one line
// that names the flag, before anything starts.
func TestBadFlagValuesExit2(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 120))
	sup := func(flags ...string) []string {
		return append(append([]string{"supervise", "--control-dir", t.TempDir()}, flags...), "--", "/nonexistent/proxy")
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		flag string
	}{
		{"health addr without port", sup("--health-addr", "notaport"), nil, "--health-addr"},
		{"health port too big", sup("--health-addr", ":99999"), nil, "--health-addr"},
		{"health port zero", sup("--health-addr", "127.0.0.1:0"), nil, "--health-addr"},
		{"health port by name", sup("--health-addr", ":http"), nil, "--health-addr"},
		{"health host junk", sup("--health-addr", "a b:15022"), nil, "--health-addr"},
		{"health host a name", sup("--health-addr", "pod.ns.svc:15022"), nil, "--health-addr"},
		{"health addr from env", sup(), map[string]string{"PROXY_SUPERVISOR_HEALTH_ADDR": ":99999"}, "--health-addr"},
		{"admin port too big", sup("--admin-url", "http://127.0.0.1:99999"), nil, "--admin-url"},
		{"admin port zero", sup("--admin-url", "http://127.0.0.1:0"), nil, "--admin-url"},
		{"admin port empty", sup("--admin-url", "http://127.0.0.1:"), nil, "--admin-url"},
		{"admin https", sup("--admin-url", "https://127.0.0.1:15000"), nil, "--admin-url"},
		{"admin without scheme", sup("--admin-url", "127.0.0.1:15000"), nil, "--admin-url"},
		{"admin without host", sup("--admin-url", "http://:15000"), nil, "--admin-url"},
		{"admin with dash in host", sup("--admin-url", "http://a-:99999"), nil, "--admin-url"},
		{"admin host a name", sup("--admin-url", "http://envoy:15000"), nil, "--admin-url"},
		{"admin from env", sup(), map[string]string{"PROXY_SUPERVISOR_ADMIN_URL": "http://127.0.0.1:99999"}, "--admin-url"},
		{"grace period negative", sup("--grace-period", "-1s"), nil, "--grace-period"},
		{"grace period leaves no drain", sup("--grace-period", "10s"), nil, "--grace-period"},
		{"grace period from env leaves no drain", sup(), map[string]string{"PROXY_SUPERVISOR_GRACE_PERIOD": "8s"}, "--grace-period"},
		{"drain delay negative", sup("--drain-delay", "-1s"), nil, "--drain-delay"},
		{"drain delay reaches the bound", sup("--drain-delay", "20s"), nil, "--drain-delay"},
		{"drain delay past a derived bound", sup("--grace-period", "20s", "--drain-delay", "10s"), nil, "--drain-delay"},
		{"drain delay from env past the bound", sup("--drain-timeout", "3s"), map[string]string{"PROXY_SUPERVISOR_DRAIN_DELAY": "3s"}, "--drain-delay"},
		{"restart policy lowercase", sup("--restart-policy", "never"), nil, "--restart-policy"},
		{"restart policy conflicts with the alias", sup("--restart-policy", "OnFailure", "--on-peer-failure", "exit"), nil, "--on-peer-failure"},
		{"restart policy conflicts with the alias from env", sup("--on-peer-failure", "wait"), map[string]string{"PROXY_SUPERVISOR_RESTART_POLICY": "Always"}, "--on-peer-failure"},
		{"health port is the admin port", sup("--health-addr", "127.0.0.1:15000"), nil, "--health-addr"},
		{"health port is the admin port, any address", sup("--health-addr", ":9901", "--admin-url", "http://127.0.0.1:9901"), nil, "--health-addr"},
		{"admin url relative unix path", sup("--admin-url", "unix:admin.sock"), nil, "--admin-url"},
		{"admin url unix with a host", sup("--admin-url", "unix://envoy/admin.sock"), nil, "--admin-url"},
		{"admin url unix path too long", sup("--admin-url", "unix://"+long+"/admin.sock"), nil, "--admin-url"},
		{"extra ready url unix", sup("--extra-ready-url", "unix:///run/ready.sock"), nil, "--extra-ready-url"},
		{"allowed uid -1", sup("--allowed-uids", "0,4294967295"), nil, "--allowed-uids"},
		{"control dir too long", sup("--control-dir", long), nil, "--control-dir"},
		{"control dir empty", sup("--control-dir", ""), nil, "--control-dir"},
		{"wait control dir too long", []string{"wait", "--timeout", "1s", "--control-dir", long}, nil, "--control-dir"},
		{"wait url port too big", []string{"wait", "--timeout", "1s", "--url", "http://127.0.0.1:99999/ready"}, nil, "--url"},
		{"wait url scheme", []string{"wait", "--timeout", "1s", "--url", "ftp://127.0.0.1/ready"}, nil, "--url"},
		{"wait url host a name", []string{"wait", "--timeout", "1s", "--url", "http://app.ns.svc:8080/ready"}, nil, "--url"},
		{"wait url https", []string{"wait", "--timeout", "1s", "--url", "https://127.0.0.1:15020/healthz/ready"}, nil, "--url"},
		{"extra ready url https", sup("--extra-ready-url", "https://127.0.0.1:15020/healthz/ready"), nil, "--extra-ready-url"},
		{"exec control dir too long", []string{"exec", "--timeout", "1s", "--control-dir", long, "--", "true"}, nil, "--control-dir"},
		{"complete timeout zero", []string{"complete", "--control-dir", t.TempDir(), "--timeout", "0s"}, nil, "--timeout"},
		{"prestop control dir too long", []string{"prestop", "--timeout", "1s", "--control-dir", long}, nil, "--control-dir"},
		{"status control dir empty", []string{"status", "--control-dir", ""}, nil, "--control-dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stderr := runFor(t, tt.args, tt.env)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if code != 2 || len(lines) != 1 || !strings.Contains(stderr, tt.flag) {
				t.Fatalf("exit %d, want 2 with one line naming %s; stderr:\n%s", code, tt.flag, stderr)
			}
		})
	}
}

// The supervisor and its clients speak plain HTTP only (no TLS in the
// binary): an https URL is refused with the flags, on one line that says
// why, rather than found out as a wait that never ends.
func TestHTTPSRefusedWithWhy(t *testing.T) {
	for _, args := range [][]string{
		{"wait", "--timeout", "1s", "--url", "https://127.0.0.1:15020/healthz/ready"},
		{"supervise", "--control-dir", t.TempDir(), "--extra-ready-url", "https://127.0.0.1:15020/healthz/ready", "--", "/nonexistent/proxy"},
		{"supervise", "--control-dir", t.TempDir(), "--admin-url", "https://127.0.0.1:15000", "--", "/nonexistent/proxy"},
	} {
		code, stderr := runFor(t, args, nil)
		if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "https is not supported") || !strings.Contains(stderr, "plain HTTP") {
			t.Errorf("%v: exit %d, want 2 with one line saying why https is refused; stderr:\n%s", args, code, stderr)
		}
	}
}

func TestGoodAddressesAccepted(t *testing.T) {
	for _, v := range []string{"", ":15022", "0.0.0.0:15022", "127.0.0.1:1", "[::]:65535", "[::1]:15022", "localhost:15022"} {
		var a listenAddr
		if err := a.Set(v); err != nil || a.String() != v {
			t.Errorf("address %q refused: %v", v, err)
		}
	}
	for _, v := range []string{"http://127.0.0.1:15000", "http://localhost:15000/", "http://[::1]:15000", "http://localhost"} {
		u := httpURL{}
		if err := u.Set(v); err != nil || u.String() != v {
			t.Errorf("URL %q refused: %v", v, err)
		}
	}
}

// The flag package's message gets two dashes before the flag's name only,
// never inside the value it quotes, and reads as ours: "invalid value V for
// --NAME" whatever the flag's type.
func TestDashed(t *testing.T) {
	for in, want := range map[string]string{
		`invalid value "a-b" for flag -admin-url: bad`:  `invalid value "a-b" for --admin-url: bad`,
		`invalid value "\" for flag -x" for flag -y: z`: `invalid value "\" for flag -x" for --y: z`,
		`invalid boolean value "-1" for -native: bad`:   `invalid value "-1" for --native: bad`,
		`flag provided but not defined: -drain-max`:     `flag provided but not defined: --drain-max`,
		`flag needs an argument: -timeout`:              `flag needs an argument: --timeout`,
		`bad flag syntax: ---x`:                         `bad flag syntax: ---x`,
	} {
		if got := dashed(in); got != want {
			t.Errorf("dashed(%q) = %q, want %q", in, got, want)
		}
	}
}

// What the flags accept, their users can use: an exit code the socket reads
// the same, an address with a real port, an admin URL with a port.
func FuzzAddressAndCodeFlags(f *testing.F) {
	f.Add("010", ":15022", "http://127.0.0.1:15000")
	f.Add("0x10", "notaport", "http://127.0.0.1:99999")
	f.Add("+7", "[::1]:0", "http://[::1]")
	f.Fuzz(func(t *testing.T, code, addr, rawURL string) {
		var c exitCode
		if c.Set(code) == nil {
			if n, err := strconv.Atoi(code); err != nil || n != int(c) || n < 0 || n > 255 {
				t.Fatalf("code %q accepted as %d", code, c)
			}
		}
		var a listenAddr
		if a.Set(addr) == nil && addr != "" {
			_, port, err := net.SplitHostPort(addr)
			if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 {
				t.Fatalf("address %q accepted", addr)
			}
		}
		u := httpURL{}
		if u.Set(rawURL) == nil && envoy.NewAdmin(u.url).Port() == 0 {
			t.Fatalf("admin URL %q accepted but unusable", rawURL)
		}
	})
}
