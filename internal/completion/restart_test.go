package completion

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
