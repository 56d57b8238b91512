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
	for _, dirty := range []string{
		"measured: proxy-supervisor 0.1.0+g65c9c78a0984.dirty (commit 65c9c78a0984dc6e083225f2a0a83b39c8c63599, date 2026-12-01T23:00:00Z, go1.26.8) (1 file changed)",
		"measured: proxy-supervisor 0.1.0+dirty (commit 65c9c78a0984dc6e083225f2a0a83b39c8c63599, date 2026-12-01T23:00:00Z, go1.26.8) (1 file changed)",
	} {
		r.machine = []string{dirty}
		if out := render(r, "benchmarks.svg"); !strings.Contains(out, "Not a report of a commit") {
			t.Errorf("%q: a dirty tree's run is not marked:\n%s", dirty, out)
		}
	}
	for _, clean := range []string{
		"measured: proxy-supervisor 1a2b3c4 (no uncommitted changes to tracked files)",
		"measured: proxy-supervisor 0.1.0+3.g65c9c78a0984 (commit 65c9c78a0984dc6e083225f2a0a83b39c8c63599, date 2026-12-01T23:00:00Z, go1.26.8) (no uncommitted changes to tracked files)",
	} {
		r.machine = []string{clean}
		if out := render(r, "benchmarks.svg"); strings.Contains(out, "Not a report of a commit") {
			t.Errorf("%q: a clean tree's run is marked dirty:\n%s", clean, out)
		}
	}
}
