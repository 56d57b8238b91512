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
	go func() { b.Watch(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
	if _, err := b.Report("side", 0, "", Anyone); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Settled():
		t.Fatalf("settled on job's stale record: %+v", b.Verdict())
	default:
	}
}
