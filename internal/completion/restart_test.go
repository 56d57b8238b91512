package completion

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// A supervisor that starts in the pod's next run after a
// RestartAllContainers sets every final record of the earlier run aside,
// whether the previous supervisor kept the trigger or never saw it; a
// restart of the proxy container alone then sets nothing more aside.
func TestBookSupersedesAnEarlierRunOfThePod(t *testing.T) {
	policy := peers.Policy{Names: []string{"job", "uploader"}, Peers: map[string]peers.PeerRestart{
		"job": {Policy: peers.Never, Rules: []peers.Rule{{Action: peers.RestartAll, Codes: []int{42}}}},
	}}
	reopen := func(d peers.Dir) *Book {
		b, err := Open(Config{Records: d, Policy: policy, Rescan: time.Minute, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b
	}
	first, d := openBook(t, policy)
	t0 := time.Now().UTC()
	for _, r := range []peers.Record{
		{Name: "uploader", ExitCode: 0, Time: t0},
		{Name: "job", ExitCode: 42, Time: t0.Add(time.Millisecond)},
	} {
		if err := d.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	// A supervisor that never saw the trigger: the first one has read
	// nothing when the pod restarts.
	first.Close()
	second := reopen(d)
	if v := second.Load("start"); v.Settled || v.Awaiting != 2 {
		t.Fatalf("the next run's start: %+v, want both peers awaited", v)
	}
	if ps, _ := second.Peers(); len(ps) != 0 {
		t.Fatalf("the status shows the earlier run's records: %+v", ps)
	}
	if err := d.Write(peers.Record{Name: "job", ExitCode: 0, Time: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if v := second.Refresh("job"); v.Settled || v.Awaiting != 1 {
		t.Fatalf("the next run's job succeeded: %+v, want uploader awaited", v)
	}
	// The proxy container restarts alone: job's success of this run counts.
	third := reopen(d)
	if v := third.Load("start"); v.Settled || v.Awaiting != 1 {
		t.Fatalf("after a lone restart: %+v, want uploader alone awaited", v)
	}
	if err := d.Write(peers.Record{Name: "uploader", ExitCode: 0, Time: t0.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if v := third.Refresh("uploader"); !v.Done || v.Code != 0 {
		t.Fatalf("the next run's uploader succeeded: %+v, want done with 0", v)
	}
}

// The copy of the record that restarts the pod goes into the .restarting/
// the book made and holds, not into one that another uid's swapped peers/
// holds (issue 26, item 3): that uid could otherwise keep a trigger of its
// own choosing, or drop the real one, for the pod's next run.
func TestTriggerIsKeptInTheHeldDirectory(t *testing.T) {
	policy := peers.Policy{Names: []string{"job"}, Peers: map[string]peers.PeerRestart{
		"job": {Policy: peers.Never, Rules: []peers.Rule{{Action: peers.RestartAll, Codes: []int{42}}}},
	}}
	b, d := openBook(t, policy)
	b.Load("start")
	away := d.Path() + ".away"
	if err := os.Rename(d.Path(), away); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(d.Path(), ".restarting"), 0o777); err != nil {
		t.Fatal(err)
	}
	// Written by the path, into the impostor, then moved into the
	// directory the book holds.
	if err := d.Write(peers.Record{Name: "job", ExitCode: 42}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(d.Path(), "job"), filepath.Join(away, "job")); err != nil {
		t.Fatal(err)
	}
	if v := b.Refresh("job"); v.PodRestart != "job" {
		t.Fatalf("verdict %+v, want job's exit to restart the pod", v)
	}
	if _, err := os.Stat(filepath.Join(away, ".restarting", "job")); err != nil {
		t.Errorf("the trigger is not kept in the held directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.Path(), ".restarting", "job")); err == nil {
		t.Error("the trigger was kept in the impostor's .restarting/")
	}
}

// The pod's next run may report before its supervisor starts (an app that
// the kubelet starts before the proxy, reporting with complete): such a
// record, whose container started after the trigger, is the new run's and
// counts, at the start and after a lone restart of the proxy container;
// a POST alone that says what an earlier run's record on disk says counts
// too. What the earlier run left is logged as such, never as a completion
// of this run (issue 38, items 3 and 9).
func TestBookCountsTheNextRunsRecordsWrittenBeforeItsStart(t *testing.T) {
	policy := peers.Policy{Names: []string{"job", "uploader", "notifier"}, Peers: map[string]peers.PeerRestart{
		"job": {Policy: peers.Never, Rules: []peers.Rule{{Action: peers.RestartAll, Codes: []int{42}}}},
	}}
	var log strings.Builder
	reopen := func(d peers.Dir) *Book {
		log.Reset()
		b, err := Open(Config{Records: d, Policy: policy, Rescan: time.Minute, Log: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b
	}
	first, d := openBook(t, policy)
	first.Load("start")
	t0 := time.Now().UTC()
	before := t0.Add(-time.Hour) // when the first run's containers started
	for _, r := range []peers.Record{
		{Name: "uploader", ExitCode: 0, Time: t0, Started: before},
		{Name: "notifier", ExitCode: 0, Time: t0.Add(time.Millisecond), Started: before},
		{Name: "job", ExitCode: 42, Time: t0.Add(2 * time.Millisecond), Started: before},
	} {
		if err := d.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if v := first.Load("rescan"); v.PodRestart != "job" {
		t.Fatalf("the first run: %+v, want job's 42 to restart the pod", v)
	}
	first.Close()
	// The second run's uploader, a container started after the trigger,
	// reports before the second supervisor starts.
	if err := d.Write(peers.Record{Name: "uploader", ExitCode: 0, Time: t0.Add(3 * time.Second), Started: t0.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	second := reopen(d)
	if v := second.Load("start"); v.Settled || v.Awaiting != 2 || !slices.Equal(v.Pending, []string{"job", "notifier"}) {
		t.Fatalf("the next run's start: %+v, want job and notifier awaited", v)
	}
	if ps, _ := second.Peers(); len(ps) != 1 || ps["uploader"].ExitCode == nil {
		t.Fatalf("the status shows %+v, want the second run's uploader alone", ps)
	}
	for _, stale := range []string{`msg="peer completed" peer=job`, `msg="peer completed" peer=notifier`, "keeping the proxy"} {
		if strings.Contains(log.String(), stale) {
			t.Errorf("the next run's supervisor logs the earlier run's record as its own (%q):\n%s", stale, log.String())
		}
	}
	if !strings.Contains(log.String(), `earlier run's (before RestartAllContainers); it decides nothing in this run" peer=job exit_code=42`) {
		t.Errorf("the earlier run's trigger is not logged as what it is:\n%s", log.String())
	}
	// The proxy container restarts alone.
	third := reopen(d)
	if v := third.Load("start"); v.Awaiting != 2 {
		t.Fatalf("after a lone restart: %+v, want job and notifier awaited", v)
	}
	// notifier's second run POSTs alone the 0 its first run's record says.
	if v, err := third.Report(peers.Record{Name: "notifier", ExitCode: 0}, 0); err != nil || v.Awaiting != 1 {
		t.Fatalf("notifier's POST: %+v, %v; want job alone awaited", v, err)
	}
	fourth := reopen(d)
	if v := fourth.Load("start"); v.Awaiting != 1 {
		t.Fatalf("after another lone restart: %+v, want job alone awaited", v)
	}
	if err := d.Write(peers.Record{Name: "job", ExitCode: 0, Started: t0.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if v := fourth.Refresh("job"); !v.Done || v.Code != 0 {
		t.Fatalf("the next run's job succeeded: %+v, want done with 0", v)
	}
}

// When the next run's own exit restarts the pod again before its
// supervisor starts, the trigger in peers/ is that run's: the records are
// held against the one the ended run's supervisor kept, so that the new
// trigger restarts the pod and is kept in its turn.
func TestBookKeepsTheNextRunsOwnTrigger(t *testing.T) {
	policy := peers.Policy{Names: []string{"job", "uploader"}, Peers: map[string]peers.PeerRestart{
		"job": {Policy: peers.Never, Rules: []peers.Rule{{Action: peers.RestartAll, Codes: []int{42}}}},
	}}
	first, d := openBook(t, policy)
	first.Load("start")
	t0 := time.Now().UTC()
	if err := d.Write(peers.Record{Name: "job", ExitCode: 42, Time: t0, Started: t0.Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if v := first.Load("rescan"); v.PodRestart != "job" {
		t.Fatalf("the first run: %+v", v)
	}
	first.Close()
	for _, r := range []peers.Record{
		{Name: "uploader", ExitCode: 0, Time: t0.Add(2 * time.Second), Started: t0.Add(time.Second)},
		{Name: "job", ExitCode: 42, Time: t0.Add(3 * time.Second), Started: t0.Add(time.Second)},
	} {
		if err := d.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	second, err := Open(Config{Records: d, Policy: policy, Rescan: time.Minute, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Close)
	if v := second.Load("start"); v.PodRestart != "job" || v.Done {
		t.Fatalf("the second run's start: %+v, want its own job's 42 to restart the pod", v)
	}
	if _, err := os.Stat(filepath.Join(d.Path(), ".restarting", "job")); err != nil {
		t.Fatalf("the second run's trigger is not kept: %v", err)
	}
}
