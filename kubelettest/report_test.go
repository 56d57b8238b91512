package kubelettest

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// theReport collects a row per scenario, printed as one table at the end of
// the suite, so that a run reads at a glance: each test's result, the pod's
// phase, every container's exit code and restarts, and its timings. The
// shared helpers fill the rows (run starts one, waitPod sets the phase,
// wantExits and wantCodes the exits, note the timings), so a scenario
// added with them is in the table without code of its own.
var theReport = &report{}

type report struct {
	mu   sync.Mutex
	rows []*row
	by   map[*testing.T]*row
}

// row is one scenario: a test or subtest that ran a pod.
type row struct {
	name   string
	start  time.Time
	took   time.Duration
	result string
	phase  []string
	exits  string
	notes  []string
}

// of returns t's row, starting it the first time: the row's result and
// duration are set when t ends.
func (r *report) of(t *testing.T) *row {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.by[t]; ok {
		return w
	}
	if r.by == nil {
		r.by = map[*testing.T]*row{}
	}
	w := &row{name: t.Name(), start: time.Now()}
	r.by[t] = w
	r.rows = append(r.rows, w)
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		w.took = time.Since(w.start)
		switch {
		case t.Failed():
			w.result = "FAIL"
		case t.Skipped():
			w.result = "SKIP"
		default:
			w.result = "ok"
		}
	})
	return w
}

// phase records a phase the pod was seen in, once per change.
func (r *report) phase(t *testing.T, phase string) {
	w := r.of(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(w.phase) == 0 || w.phase[len(w.phase)-1] != phase {
		w.phase = append(w.phase, phase)
	}
}

// exits records the containers' exits as the kubelet reports them: the
// code, and the restarts when there were any.
func (r *report) exits(t *testing.T, p *corev1.Pod) {
	var parts []string
	for _, s := range statuses(p) {
		e := "-"
		if s.State.Terminated != nil {
			e = fmt.Sprint(s.State.Terminated.ExitCode)
		}
		switch {
		case s.RestartCount == 1:
			e += " (1 restart)"
		case s.RestartCount > 1:
			e += fmt.Sprintf(" (%d restarts)", s.RestartCount)
		}
		parts = append(parts, s.Name+" "+e)
	}
	r.setExits(t, strings.Join(parts, ", "))
}

// codes records the containers' exit codes as the runtime reports them.
func (r *report) codes(t *testing.T, got map[string]criStatus) {
	var parts []string
	for name, s := range got {
		parts = append(parts, fmt.Sprintf("%s %d", name, s.ExitCode))
	}
	slices.Sort(parts)
	r.setExits(t, strings.Join(parts, ", "))
}

func (r *report) setExits(t *testing.T, exits string) {
	w := r.of(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	w.exits = exits
}

// note logs a scenario's timing and puts it in its row.
func note(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.Log(msg)
	w := theReport.of(t)
	theReport.mu.Lock()
	defer theReport.mu.Unlock()
	w.notes = append(w.notes, msg)
}

// print writes the table, in the order the scenarios started.
func (r *report) print(out io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rows) == 0 {
		return
	}
	fmt.Fprintln(out, "\nkubelettest: the scenarios (phase: as the kubelet reported it, in order; exits: code per container; took: from the manifest to the test's end)")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tRESULT\tPHASE\tEXITS\tTOOK\tTIMINGS")
	for _, w := range r.rows {
		result, phase, exits := w.result, strings.Join(w.phase, " → "), w.exits
		if result == "" {
			result = "running" // its cleanup has not run: the suite was cut short
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", w.name, result, or(phase), or(exits),
			w.took.Round(100*time.Millisecond), or(strings.Join(w.notes, "; ")))
	}
	tw.Flush()
}

func or(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// The table has a row per scenario that ran, with what the helpers
// recorded; a scenario cut short says so.
func TestReportTable(t *testing.T) {
	r := &report{}
	t.Run("done", func(t *testing.T) {
		r.phase(t, "Pending")
		r.phase(t, "Running")
		r.phase(t, "Running")
		r.phase(t, "deleted")
		r.setExits(t, "envoy 0, web 137")
	})
	var cut *row
	t.Run("cut", func(t *testing.T) { cut = r.of(t) })
	cut.result = ""
	var out strings.Builder
	r.print(&out)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a title, a header and 2 rows:\n%s", out.String())
	}
	for i, want := range [][]string{
		{"SCENARIO", "RESULT", "PHASE", "EXITS", "TOOK", "TIMINGS"},
		{"TestReportTable/done", "ok", "Pending → Running → deleted", "envoy 0, web 137"},
		{"TestReportTable/cut", "running", "-"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("line %q lacks %q:\n%s", lines[i+1], w, out.String())
			}
		}
	}
}
