package completion

import (
	"io"
	"log/slog"
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
