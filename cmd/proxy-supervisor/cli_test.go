package main

import (
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// --version and version print the same one line, as kubectl's and Go's
// tools do; -v is not the version (it means verbose there), and says where
// the version is.
func TestVersion(t *testing.T) {
	defer func(v, c, d string) { version, commit, date = v, c, d }(version, commit, date)
	version, commit, date = "0.1.0+3.g65c9c78a0984", "65c9c78a0984dc6e083225f2a0a83b39c8c63599", "2026-11-27T11:43:09Z"
	want := fmt.Sprintf("proxy-supervisor 0.1.0+3.g65c9c78a0984 (commit 65c9c78a0984dc6e083225f2a0a83b39c8c63599, date 2026-11-27T11:43:09Z, %s)\n", runtime.Version())
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		var out, errw bytes.Buffer
		if code := run(args, envOf(nil), &out, &errw); code != 0 || out.String() != want || errw.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 0 and %q", args, code, out.String(), errw.String(), want)
		}
	}
	var out, errw bytes.Buffer
	if code := run([]string{"-v"}, envOf(nil), &out, &errw); code != 2 || out.Len() != 0 || !strings.Contains(errw.String(), "--version") {
		t.Errorf("-v: exit %d, stdout %q, stderr %q; want 2 and a line pointing at --version", code, out.String(), errw.String())
	}
}

// Help asked for goes to stdout with exit 0, for every command and every
// way of asking; no command at all is bad usage: the list on stderr, exit 2.
func TestHelpOnEveryCommand(t *testing.T) {
	help := func(args ...string) (int, string, string) {
		var out, errw bytes.Buffer
		code := run(args, envOf(nil), &out, &errw)
		return code, out.String(), errw.String()
	}
	for _, ask := range []string{"-h", "-help", "--help"} {
		for _, c := range commands() {
			code, out, errw := help(c.name, ask)
			if code != 0 || errw != "" || !strings.HasPrefix(out, "Usage: proxy-supervisor "+c.name) {
				t.Errorf("%s %s: exit %d, stderr %q, stdout:\n%s", c.name, ask, code, errw, out)
			}
			if _, o2, _ := help("help", c.name); o2 != out {
				t.Errorf("help %s differs from %s %s:\n%s", c.name, c.name, ask, o2)
			}
		}
		code, out, errw := help(ask)
		if code != 0 || errw != "" || !strings.Contains(out, "Commands, by when") {
			t.Errorf("%s: exit %d, stderr %q, stdout:\n%s", ask, code, errw, out)
		}
	}
	if code, out, errw := help(); code != 2 || out != "" || !strings.Contains(errw, "Commands, by when") {
		t.Errorf("no command: exit %d, stdout %q, stderr:\n%s", code, out, errw)
	}
}

// One placeholder style in every command's help: an upper-case word, a
// list as ITEM,..., a fixed set as its words joined by |; none after a bool
// flag, and no line ends in a space.
func TestHelpPlaceholders(t *testing.T) {
	generic := map[string]bool{"STRING": true, "VALUE": true, "INT": true, "UINT": true, "FLOAT": true}
	form := regexp.MustCompile(`^(?:[A-Z][A-Z:]*(?:\|[A-Z]+)*(?:,\.\.\.)?|[A-Za-z]+(?:\|[A-Za-z]+)+)$`)
	for _, c := range commands() {
		var out bytes.Buffer
		run([]string{c.name, "--help"}, envOf(nil), &out, &out)
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.HasSuffix(line, " ") {
				t.Errorf("%s --help: trailing space in %q", c.name, line)
			}
			rest, ok := strings.CutPrefix(line, "  --")
			if !ok {
				continue
			}
			name, arg, ok := strings.Cut(rest, " ")
			switch {
			case !ok:
			case generic[arg]:
				t.Errorf("%s --help: --%s shows the flag package's %s; name its form: a word in backquotes in its usage, f.text, or a placeholder method", c.name, name, arg)
			case !form.MatchString(arg):
				t.Errorf("%s --help: placeholder %q of --%s is not in the help's style (DURATION, UID,..., Never|OnFailure)", c.name, arg, name)
			}
		}
	}
}

// A bad value is refused on one line that names the flag and the form it
// wants, from the command line and from the environment alike.
func TestBadValueNamesTheForm(t *testing.T) {
	sup := func(flags ...string) []string {
		return append(append([]string{"supervise", "--check"}, flags...), "--", "envoy")
	}
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{sup("--drain-min", "5x"), nil, `supervise: invalid value "5x" for --drain-min: want a duration such as 5s or 300ms`},
		{sup(), map[string]string{"PROXY_SUPERVISOR_DRAIN_MIN": "5x"}, `supervise: invalid value "5x" for --drain-min (from PROXY_SUPERVISOR_DRAIN_MIN): want a duration such as 5s or 300ms`},
		{sup("--strict-ready=yes"), nil, `supervise: invalid value "yes" for --strict-ready: want true or false`},
		{sup("--restart-policy", "never"), nil, `supervise: invalid value "never" for --restart-policy: want one of Never, OnFailure, Always`},
		{sup("--app-ports", "8080,http"), nil, `supervise: invalid value "8080,http" for --app-ports: "http" is not a port; want a comma list of ports from 1 to 65535, such as 8080,9090`},
		{sup("--allowed-uids", "root"), nil, `supervise: invalid value "root" for --allowed-uids: "root" is not a uid; want a comma list of uids, such as 1000,1337`},
		{sup("--proxy-uid", "istio"), nil, `supervise: invalid value "istio" for --proxy-uid: want a uid, such as 1337`},
		{sup("--drain-max", "1s"), nil, `supervise: unknown flag --drain-max: did you mean --drain-min? (proxy-supervisor supervise --help lists the flags)`},
		{sup("--xyzzy", "1s"), nil, `supervise: unknown flag --xyzzy (proxy-supervisor supervise --help lists the flags)`},
		{[]string{"wait", "--check", "--timeout"}, nil, `wait: --timeout needs a value: DURATION`},
		{[]string{"complete", "--check", "--exit-code", "x"}, nil, `complete: invalid value "x" for --exit-code: want a decimal integer from 0 to 255`},
	} {
		code, stderr := runFor(t, tt.args, tt.env)
		if want := "proxy-supervisor: " + tt.want + "\n"; code != 2 || stderr != want {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr, want)
		}
	}
}

// Every duration flag of every command, and only those, shows DURATION and
// refuses a bad value naming the form: a flag added later with
// f.fs.Duration gets both without more code.
func TestEveryDurationFlag(t *testing.T) {
	const why = "want a duration such as 5s or 300ms"
	for _, c := range commands() {
		var out bytes.Buffer
		run([]string{c.name, "--help"}, envOf(nil), &out, &out)
		h, _ := parseHelp(out.String())
		for _, f := range h.flags {
			if f.arg == "" {
				continue
			}
			args := []string{c.name, "--check", "--" + f.name, "5x", "--", "/nonexistent/x"}
			_, stderr := runFor(t, args, nil)
			if got := strings.Contains(stderr, why); got != (f.arg == "DURATION") {
				t.Errorf("%s --%s %s: refusing 5x says %q", c.name, f.name, f.arg, stderr)
			}
		}
	}
}

// A command that takes no argument refuses one, in one line and before it
// acts, as wait and status do: prestop's drain and complete's record are
// not started by a command line that says something else.
func TestStrayArgumentIsRefused(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"prestop", "--control-dir", dir, "now"},
		{"complete", "--control-dir", dir, "--exit-code", "0", "extra"},
		{"wait", "--control-dir", dir, "extra"},
	} {
		var out, errw bytes.Buffer
		code := run(args, envOf(nil), &out, &errw)
		if want := fmt.Sprintf("proxy-supervisor: %s: unexpected argument %q\n", args[0], args[len(args)-1]); code != 2 || errw.String() != want {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", args, code, errw.String(), want)
		}
	}
}

// The command table is the timeline that the package's doc comment draws:
// the same commands at the same moments in the same order, so that neither
// can change without the other.
func TestCommandsAreTheDocTimeline(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	// A timeline line is indented by a tab: its moment in the first column,
	// when it starts one, and a command in the second, at column 8.
	known := map[string]bool{}
	for _, c := range commands() {
		known[c.name] = true
	}
	var doc []string
	moment := ""
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		line, ok := strings.CutPrefix(line, "\t")
		if !ok || len(line) <= 8 || line[8] == ' ' {
			continue
		}
		if line[0] != ' ' {
			moment = strings.Fields(line)[0]
		}
		if name := strings.TrimRight(strings.Fields(line[8:])[0], ","); known[name] {
			doc = append(doc, moment+" "+name)
		}
	}
	var table []string
	for _, c := range commands() {
		if c.when != anyTime {
			table = append(table, c.when+" "+c.name)
		}
	}
	if strings.Join(doc, ", ") != strings.Join(table, ", ") || len(doc) == 0 {
		t.Fatalf("the doc comment's timeline is %q; the command table's is %q", doc, table)
	}
}
