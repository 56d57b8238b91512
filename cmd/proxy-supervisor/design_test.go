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

// docs/design.md carries the command list and every command's flags as
// tables generated from the binary's own --help, between markers:
//
//	<!-- generated: flags supervise -->
//	...
//	<!-- end generated -->
//
// The test fails when a table and --help disagree; -update rewrites the
// tables in place:
//
//	go test ./cmd/proxy-supervisor -run TestDesignTablesMatchHelp -update
var update = flag.Bool("update", false, "rewrite docs/design.md's generated tables from --help")

const designDoc = "../../docs/design.md"

var generatedBlock = regexp.MustCompile(`(?s)(<!-- generated: ([a-z ]+) -->\n)(.*?)(<!-- end generated -->)`)

func TestDesignTablesMatchHelp(t *testing.T) {
	want := designTables(t)
	doc, err := os.ReadFile(designDoc)
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
			t.Errorf("%s: block %q: no such generated table (want one of %v)", designDoc, name, keys(want))
		case got != w && !*update:
			t.Errorf("%s: block %q differs from --help; run\n\tgo test ./cmd/proxy-supervisor -run %s -update\n--- doc\n%s--- help\n%s",
				designDoc, name, t.Name(), got, w)
		}
		if !ok {
			return m
		}
		return append(append(append([]byte{}, sub[1]...), w...), sub[4]...)
	})
	for name := range want {
		if !seen[name] {
			t.Errorf("%s: no block for %q: add <!-- generated: %s --> and <!-- end generated --> where it belongs, then run with -update", designDoc, name, name)
		}
	}
	if *update && !bytes.Equal(out, doc) {
		if err := os.WriteFile(designDoc, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", designDoc)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// designTables renders, by block name, what docs/design.md must say: the
// command list, and for each command its synopsis, description and flags.
// The environment is empty, so that defaults are the built-in ones.
func designTables(t *testing.T) map[string]string {
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
