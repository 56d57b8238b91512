package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// docs/reference.md carries the command list and every command's flags as
// tables generated from the binary's own --help, between markers:
//
//	<!-- generated: flags supervise -->
//	...
//	<!-- end generated -->
//
// The test fails when a table and --help disagree; -update rewrites the
// tables in place:
//
//	go test ./cmd/proxy-supervisor -run TestReferenceMatchesHelp -update
//
// The other tests hold the prose to --help as well: every command that
// --help lists has its section, and every flag that the reference or the
// design names is one that some command takes.
var update = flag.Bool("update", false, "rewrite docs/reference.md's generated tables from --help")

const (
	referenceDoc = "../../docs/reference.md"
	designDoc    = "../../docs/design.md"
)

var generatedBlock = regexp.MustCompile(`(?s)(<!-- generated: ([a-z ]+) -->\n)(.*?)(<!-- end generated -->)`)

func TestReferenceMatchesHelp(t *testing.T) {
	want := referenceTables(t)
	doc, err := os.ReadFile(referenceDoc)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	out := generatedBlock.ReplaceAllFunc(doc, func(m []byte) []byte {
		sub := generatedBlock.FindSubmatch(m)
		name, got := string(sub[2]), string(sub[3])
		seen[name] = true
		w, ok := want[name]
		switch {
		case !ok:
			t.Errorf("%s: block %q: no such generated table (want one of %v)", referenceDoc, name, keys(want))
		case got != w && !*update:
			t.Errorf("%s: block %q differs from --help; run\n\tgo test ./cmd/proxy-supervisor -run %s -update\n--- doc\n%s--- help\n%s",
				referenceDoc, name, t.Name(), got, w)
		}
		if !ok {
			return m
		}
		return append(append(append([]byte{}, sub[1]...), w...), sub[4]...)
	})
	for name := range want {
		if !seen[name] {
			t.Errorf("%s: no block for %q: add <!-- generated: %s --> and <!-- end generated --> where it belongs, then run with -update", referenceDoc, name, name)
		}
	}
	if *update && !bytes.Equal(out, doc) {
		if err := os.WriteFile(referenceDoc, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", referenceDoc)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// referenceTables renders, by block name, what docs/reference.md must say: the
// command list, and for each command its synopsis, description and flags.
// The environment is empty, so that defaults are the built-in ones.
func referenceTables(t *testing.T) map[string]string {
	t.Helper()
	noEnv := func(string) string { return "" }
	var list strings.Builder
	list.WriteString("| command | does |\n|---|---|\n")
	blocks := map[string]string{}
	for _, c := range commands() {
		var stdout, stderr bytes.Buffer
		code := run([]string{c.name, "--help"}, noEnv, &stdout, &stderr)
		if code != 0 {
			t.Fatalf("%s --help: exit %d: %s", c.name, code, stderr.String())
		}
		h, ok := parseHelp(stdout.String())
		if !ok {
			t.Fatalf("%s --help: not a help text:\n%s", c.name, stdout.String())
		}
		fmt.Fprintf(&list, "| `%s` | %s |\n", cell(h.synopsis), cell(c.about))
		var b strings.Builder
		fmt.Fprintf(&b, "`proxy-supervisor %s`\n\n%s\n", h.synopsis, h.about)
		if len(h.flags) > 0 {
			b.WriteString("\n| flag | variable | default | meaning |\n|---|---|---|---|\n")
			for _, f := range h.flags {
				def := "none"
				if f.def != "" {
					def = "`" + f.def + "`"
				}
				env := "—"
				if f.env != "" {
					env = "`" + f.env + "`"
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", cell(strings.TrimSpace("--"+f.name+" "+f.arg)), env, def, cell(f.usage))
			}
		}
		blocks["command "+c.name] = b.String()
	}
	blocks["commands"] = list.String()
	return blocks
}

// cell makes text safe in a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

type helpFlag struct{ name, arg, usage, env, def string }

type help struct {
	synopsis, about string
	flags           []helpFlag
}

// parseHelp reads the help text that flags.usage writes.
func parseHelp(text string) (help, bool) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	syn, ok := strings.CutPrefix(lines[0], "Usage: proxy-supervisor ")
	if !ok || len(lines) < 3 || lines[1] != "" {
		return help{}, false
	}
	h := help{synopsis: syn, about: lines[2]}
	for i := 3; i < len(lines); i++ {
		name, ok := strings.CutPrefix(lines[i], "  --")
		if !ok || i+1 >= len(lines) {
			continue
		}
		name, arg, _ := strings.Cut(name, " ")
		usage := strings.TrimSpace(lines[i+1])
		i++
		// A flag that the environment never sets (--check) has no env line.
		env, def := "", ""
		if i+1 < len(lines) {
			if e, ok := strings.CutPrefix(lines[i+1], "      env "); ok {
				env, def, _ = strings.Cut(e, ", default ")
				i++
			}
		}
		h.flags = append(h.flags, helpFlag{name, arg, usage, env, def})
	}
	return h, true
}

// TestParseHelpSeesEveryFlag keeps parseHelp honest: every "  --" line of a
// command's help must come out as a flag, or a change to the help's layout
// would silently drop flags from the docs.
func TestParseHelpSeesEveryFlag(t *testing.T) {
	for _, c := range commands() {
		var out bytes.Buffer
		run([]string{c.name, "--help"}, func(string) string { return "" }, &out, &out)
		h, _ := parseHelp(out.String())
		if n := strings.Count(out.String(), "\n  --"); n != len(h.flags) {
			t.Errorf("%s --help lists %d flags, parseHelp found %d", c.name, n, len(h.flags))
		}
	}
}

// helpCommand is a command line of the top-level --help: two spaces, the
// moment (blank under the first of its moment), the command, what it does.
var helpCommand = regexp.MustCompile(`(?m)^  .{9} ([a-z]+) +\S`)

// TestReferenceListsEveryCommand reads the command list from the top-level
// --help, not from the table the generated blocks are made from, so that a
// command added to one and not the other is caught too: each needs its
// section and its generated block in the reference.
func TestReferenceListsEveryCommand(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--help"}, func(string) string { return "" }, &out, &out); code != 0 {
		t.Fatalf("--help: exit %d: %s", code, out.String())
	}
	doc, err := os.ReadFile(referenceDoc)
	if err != nil {
		t.Fatal(err)
	}
	found := helpCommand.FindAllStringSubmatch(out.String(), -1)
	if len(found) < 2 {
		t.Fatalf("--help lists %d commands; has its layout changed?\n%s", len(found), out.String())
	}
	for _, m := range found {
		name := m[1]
		for _, want := range []string{"\n### " + name + "\n", "<!-- generated: command " + name + " -->"} {
			if !bytes.Contains(doc, []byte(want)) {
				t.Errorf("%s: command %q of --help has no %q", referenceDoc, name, strings.TrimSpace(want))
			}
		}
	}
}

// docFlag is a flag as the docs write it: --name, not inside a longer word.
var docFlag = regexp.MustCompile(`(^|[^\w-])--([a-z][a-z0-9-]*[a-z0-9])`)

// foreignFlags are other programs' flags that the docs name, each with its
// program: they are not ours to find in --help.
var foreignFlags = map[string]string{
	"drain-time-s":   "envoy",
	"drain-strategy": "envoy",
	"concurrency":    "envoy",
	"unix-socket":    "curl",
	"fake-version":   "fake-envoy",
}

// TestDocsNameOnlyRealFlags fails when the reference or the design names a
// flag that no command takes (a flag renamed or removed, and the prose left
// behind), or when a foreign flag listed above has become one of ours.
func TestDocsNameOnlyRealFlags(t *testing.T) {
	real := map[string]bool{"help": true, "version": true} // proxy-supervisor --help, --version
	for _, c := range commands() {
		var out bytes.Buffer
		run([]string{c.name, "--help"}, func(string) string { return "" }, &out, &out)
		h, ok := parseHelp(out.String())
		if !ok {
			t.Fatalf("%s --help: not a help text:\n%s", c.name, out.String())
		}
		for _, f := range h.flags {
			real[f.name] = true
		}
	}
	for name, prog := range foreignFlags {
		if real[name] {
			t.Errorf("--%s is listed as %s's flag, but a command of ours takes it", name, prog)
		}
	}
	for _, path := range []string{referenceDoc, designDoc} {
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, m := range docFlag.FindAllStringSubmatch(string(doc), -1) {
			name := m[2]
			if real[name] || foreignFlags[name] != "" || seen[name] {
				continue
			}
			seen[name] = true
			t.Errorf("%s names --%s, which no command takes (see proxy-supervisor COMMAND --help)", path, name)
		}
	}
}
