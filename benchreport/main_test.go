package main

import (
	"strings"
	"testing"
)

// The current run says when it measured a dirty tree, and gives each
// section of latencies the command that measures it again.
func TestRenderMarksADirtyTreeAndNamesEachCommand(t *testing.T) {
	r := &report{
		machine: []string{"measured: proxy-supervisor 1a2b3c4-dirty (1 file changed); 2026-11-27T07:00Z"},
		rows: []row{
			{section: "readiness: LIVE to wait's exit", subject: "proxy-supervisor wait", n: 1, p50: 7},
			{section: "pod in a real kubelet: proxy ready → app container started", subject: "native", n: 1, p50: 80},
		},
	}
	out := render(r, "benchmarks.svg")
	for _, want := range []string{
		"## Current run",
		"**Not a report of a commit:**",
		"-bench '^BenchmarkReadiness$'",
		"-run '^TestPodFigures$'",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	r.machine = []string{"measured: proxy-supervisor 1a2b3c4 (no uncommitted changes to tracked files)"}
	if out := render(r, "benchmarks.svg"); strings.Contains(out, "Not a report of a commit") {
		t.Errorf("a clean tree's run is marked dirty:\n%s", out)
	}
}
