package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
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
