package completion

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

func openBook(t *testing.T, policy peers.Policy) (*Book, peers.Dir) {
	t.Helper()
	d := peers.Open(t.TempDir())
	b, err := Open(Config{
		Records: d,
		Policy:  policy,
		Rescan:  time.Minute, // only the notifier can be quick
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, d
}

func watch(t *testing.T, b *Book) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.KeepCurrent(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	proctest.Eventually(t, 10*time.Second, what, cond)
}

func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads in /proc/self/status")
	return 0
}

func fds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func count(b *Book, pred func(Peer) bool) int {
	ps, _ := b.Peers()
	n := 0
	for _, p := range ps {
		if pred(p) {
			n++
		}
	}
	return n
}

// Watching running peers costs no thread and keeps no descriptor once a
// lock is released. (Each running record once had a watcher blocked in
// flock, an OS thread each, never given back: 2000 records took the
// supervisor from 7 to 2006 threads and 63 MB.)
func TestWatchingRunningPeersCostsNoThread(t *testing.T) {
	const n = 300
	b, d := openBook(t, peers.Policy{Count: n + 1})
	threadsBefore, fdsBefore := threads(t), fds(t)
	runs := make([]*peers.Run, n)
	for i := range runs {
		r, err := d.Begin(fmt.Sprintf("peer%d", i))
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = r
	}
	fdsHeld := fds(t) - fdsBefore // the runs' own locks and claims
	watch(t, b)
	b.Load("test")
	eventually(t, "every peer reads as running", func() bool { return count(b, func(p Peer) bool { return p.Running }) == n })
	if grew := threads(t) - threadsBefore; grew > 10 {
		t.Errorf("watching %d running peers took %d threads", n, grew)
	}
	for _, r := range runs {
		r.Abort()
	}
	eventually(t, "every released lock reads as lost", func() bool {
		return count(b, func(p Peer) bool { return p.Reason == string(peers.Lost) }) == n
	})
	if grew := threads(t) - threadsBefore; grew > 10 {
		t.Errorf("after the locks were released, %d threads more than before", grew)
	}
	if left := fds(t) - fdsBefore; left > 5 {
		t.Errorf("after the locks were released, %d descriptors more than before (the runs held %d)", left, fdsHeld)
	}
}

// A record written without a poke is seen at once, not at the rescan.
func TestRecordWithoutPokeIsSeenAtOnce(t *testing.T) {
	b, d := openBook(t, peers.Policy{Count: 1})
	watch(t, b)
	if err := d.Write(peers.Record{Name: "app", ExitCode: 3, Reason: peers.Exited}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Settled():
	case <-time.After(5 * time.Second):
		t.Fatal("a record written without a poke was not seen")
	}
	if v := b.Verdict(); !v.Done || v.Code != 3 {
		t.Fatalf("verdict %+v", v)
	}
}

// A report whose quick view would settle on another peer's stale record
// does not settle: the full read sees that peer running again.
func TestReportDoesNotSettleOnAStaleRecord(t *testing.T) {
	b, d := openBook(t, peers.Policy{Names: []string{"job", "side"}})
	if err := d.Write(peers.Record{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	b.Load("test")
	run, err := d.Begin("job") // job's container restarted
	if err != nil {
		t.Fatal(err)
	}
	defer run.Abort()
	if _, err := b.Report(peers.Record{Name: "side", ExitCode: 0}, Anyone); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Settled():
		t.Fatalf("settled on job's stale record: %+v", b.Verdict())
	default:
	}
}

// Peer names are bounded: a POST of a new name past the bound is refused,
// one of a known name is not. (Nothing bounded them: 20,000 POSTs of
// distinct names did not finish in 500 s.)
func TestPostedNamesAreBounded(t *testing.T) {
	policy := peers.Policy{Count: 2, Restart: peers.OnFailure} // failures leave the verdict open
	b, _ := openBook(t, policy)
	limit := NameLimit(policy)
	if limit != MinNames {
		t.Fatalf("NameLimit(%+v) = %d, want %d", policy, limit, MinNames)
	}
	for i := range limit {
		if _, err := b.Report(peers.Record{Name: fmt.Sprintf("p%d", i), ExitCode: 1}, Anyone); err != nil {
			t.Fatalf("report %d of %d: %v", i+1, limit, err)
		}
	}
	_, err := b.Report(peers.Record{Name: "one-too-many", ExitCode: 1}, Anyone)
	if err == nil || !strings.Contains(err.Error(), "bound") {
		t.Fatalf("a name past the bound: %v; want a refusal naming the bound", err)
	}
	if _, err := b.Report(peers.Record{Name: "p0", ExitCode: 0}, Anyone); err != nil {
		t.Fatalf("a known name past the bound: %v", err)
	}
	if got := NameLimit(peers.Policy{Count: 100}); got != 400 {
		t.Errorf("NameLimit of --peers 100 = %d, want 400", got)
	}
}

// A rescan reads no further than the bound, however many names another
// container planted: its cost does not grow with them. (20,000 records kept
// the supervisor at a third of a CPU, rescanned every second.)
func TestRescanReadsNoFurtherThanTheBound(t *testing.T) {
	policy := peers.Policy{Count: 1}
	b, d := openBook(t, policy)
	for i := range 3000 {
		name := fmt.Sprintf("junk%d", i)
		rec := fmt.Sprintf(`{"name":%q,"running":true,"time":"2026-01-01T00:00:00Z"}`, name)
		if err := os.WriteFile(d.Path()+"/"+name, []byte(rec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b.Load("test")
	ps, _ := b.Peers()
	if len(ps) > NameLimit(policy) {
		t.Fatalf("the book holds %d names; its bound is %d", len(ps), NameLimit(policy))
	}
	// With listed names, only those are read.
	listed := peers.Policy{Names: []string{"job"}}
	b2, err := Open(Config{Records: d, Policy: listed, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	b2.Load("test")
	if ps, _ := b2.Peers(); len(ps) != 0 {
		t.Fatalf("a book of listed names read %d other names", len(ps))
	}
}

// Under Always an app's exit settles the verdict for the drain, and its
// restart unsettles it again: a drain that starts then must wait for the
// app that runs now, not end on the earlier exit. (Settled was closed once
// and for all, so a Deployment's app that had crashed once ended every
// later drain at once.)
func TestSettledRearmsWhenTheAppRestarts(t *testing.T) {
	b, d := openBook(t, peers.Policy{Count: 1, Restart: peers.Always})
	if err := d.Write(peers.Record{Name: "app", ExitCode: 2, Reason: peers.Exited}); err != nil {
		t.Fatal(err)
	}
	if v := b.Load("test"); !v.Settled || v.Done {
		t.Fatalf("verdict %+v after an exit under Always, want settled and not done", v)
	}
	select {
	case <-b.Settled():
	default:
		t.Fatal("Settled not closed after the app ended")
	}
	run, err := d.Begin("app") // the kubelet restarted it
	if err != nil {
		t.Fatal(err)
	}
	defer run.Abort()
	b.Load("test")
	select {
	case <-b.Settled():
		t.Fatalf("Settled still closed while the restarted app runs: %+v", b.Verdict())
	default:
	}
	if at := b.SettledAt(); at.IsZero() {
		t.Fatal("SettledAt forgot the first settling")
	}
}

// Running counts what the status lists as running, and follows a run's end.
func TestRunningCountsRunningPeers(t *testing.T) {
	b, d := openBook(t, peers.Policy{Count: 4})
	var runs []*peers.Run
	for _, name := range []string{"a", "b"} {
		r, err := d.Begin(name)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	t.Cleanup(func() {
		for _, r := range runs {
			r.Abort()
		}
	})
	if err := d.Write(peers.Record{Name: "c", ExitCode: 0, Reason: peers.Exited}); err != nil {
		t.Fatal(err)
	}
	watch(t, b)
	b.Load("test")
	if got, _ := b.Running(); got != 2 || count(b, func(p Peer) bool { return p.Running }) != 2 {
		t.Fatalf("Running() = %d, the status lists %d running; want 2", got, count(b, func(p Peer) bool { return p.Running }))
	}
	runs[0].Abort()
	eventually(t, "one peer left running", func() bool { n, _ := b.Running(); return n == 1 })
}

// Another uid renames peers/ away and makes its own (issue 26, 2.3). The
// book goes on reading the directory it created, so a peer running there
// still runs, and says the path names another: while it does, no running
// peer is never an answer, and a record in the impostor is never read.
func TestReplacedRecordsDirectory(t *testing.T) {
	b, d := openBook(t, peers.Policy{Count: 1})
	run, err := d.Begin("app")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Abort() })
	b.Load("test")
	away := d.Path() + ".away"
	if err := os.Rename(d.Path(), away); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(d.Path(), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := d.Write(peers.Record{Name: "app", ExitCode: 0, Reason: peers.Exited}); err != nil {
		t.Fatal(err) // by the path: into the impostor
	}
	if v := b.Load("test"); v.Settled {
		t.Fatalf("a record in the impostor settled the verdict: %+v", v)
	}
	if n, err := b.Running(); n != 1 || err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("Running() = %d, %v; want the run in the directory created, and the replacement", n, err)
	}
	if err := run.Abort(); err != nil {
		t.Fatal(err)
	}
	b.Load("test")
	if n, err := b.Running(); n != 0 || err == nil {
		t.Fatalf("Running() = %d, %v; want none known, and the error", n, err)
	}
	if b.Replaced() == nil {
		t.Fatal("Replaced() = nil with the path naming another directory")
	}
	// Back in place, all is as before.
	if err := os.RemoveAll(d.Path()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(away, d.Path()); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Running(); n != 0 || err != nil {
		t.Fatalf("Running() = %d, %v once the directory is back", n, err)
	}
}
