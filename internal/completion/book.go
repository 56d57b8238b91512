// Package completion keeps the supervisor's book of what the app containers
// (peers) have reported, and the verdict that the restart policy draws from
// it.
//
// The book merges three stores, each name's latest record winning: the
// peers' own records on disk (peers/<name>), the completions that came by
// POST alone and were kept on disk by the supervisor (peers/.posted/<name>),
// and those it could not keep there (in memory, for this run only). It reads
// them at start, on every poke, whenever a running peer's lock is released,
// and on a periodic rescan that backs the others up.
package completion

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// MinNames is the fewest peer names a book keeps; see NameLimit.
const MinNames = 64

// NameLimit is how many distinct peer names a book keeps under a policy:
// the names it lists, or four times its count and at least MinNames. Every
// name costs a read on every rescan, and names are free for any container
// to make up, so past the limit a new name is refused.
func NameLimit(p peers.Policy) int {
	if len(p.Names) > 0 {
		return len(p.Names)
	}
	return max(MinNames, 4*p.Count)
}

// DefaultRescan is how often the records are read without a poke. Pokes and
// lock releases are the fast path; the rescan only backs them up, for a
// record written while no supervisor was listening to a poke.
const DefaultRescan = time.Second

// Config is a book's store and policy.
type Config struct {
	Records peers.Dir
	Policy  peers.Policy
	// AllowedUIDs, when set, are the uids whose records count.
	AllowedUIDs []uint32
	// Rescan is how often KeepCurrent reads the records; zero means DefaultRescan.
	Rescan time.Duration
	// Recorded, if set, is told of every final record the book sees for the
	// first time (for metrics).
	Recorded func(peers.Record)
	// Clock stamps the verdict's settling (SettledAt), on the supervisor's
	// time; nil means the system's. The rescan keeps the system's pace.
	Clock clock.Clock
	Log   *slog.Logger
}

// Book is the merged view of the records. Its methods are safe for
// concurrent use; one mutex serializes the reads of the stores and guards
// what they found, so a slow read never replaces the book with something
// older than a faster one stored.
type Book struct {
	cfg      Config
	posted   peers.Dir
	kept     bool            // posted completions can be kept on disk
	notifier *peers.Notifier // nil where inotify is not available
	oldRuns  peers.Dir       // copies of an earlier run's records; see supersede
	trigger  peers.Dir       // the record that restarts the whole pod; see supersede
	oldKept  bool            // and both can be kept on disk

	mu        sync.Mutex
	recs      map[string]peers.Record
	verdict   peers.Verdict
	memory    map[string]peers.Record // POSTed completions of this run
	reporters map[string]uint32       // who POSTed each of them
	skipped   map[string]bool         // unreadable records already logged
	replaced  error                   // peers/'s path names another directory (Replaced)
	said      [2]bool                 // the replacement, and the return, were logged: once each
	settled   chan struct{}           // closed while the verdict is settled
	reopened  chan struct{}           // closed when a settled verdict opens again; then replaced
	settledAt time.Time
	started   bool                 // the first read, the supervisor's start, is done
	outdated  map[string]time.Time // records of an earlier run of the pod, by name and time
	triggered bool                 // this run's trigger is kept in trigger
	told      []peers.Record       // final records for Recorded, told once mu is released
}

// Open creates the records directory (and the control dir, if missing),
// the store of posted completions and those of an earlier run's records
// (see supersede), then returns the book; it reads no peer's record yet.
// The book keeps these directories open and reads them, and only them,
// through their descriptors (see Replaced). A peer can plant something
// where a store of the supervisor's goes (peers/ is writable by all);
// completions that come by POST alone then still count for this run, and
// an earlier run's records are still set aside, but neither is kept,
// rather than the supervisor failing to start.
func Open(cfg Config) (*Book, error) {
	if cfg.Rescan <= 0 {
		cfg.Rescan = DefaultRescan
	}
	cfg.Clock = clock.Or(cfg.Clock)
	held, err := cfg.Records.CreateHeld()
	if err != nil {
		return nil, fmt.Errorf("completion records: %w", err)
	}
	cfg.Records = held
	b := &Book{
		cfg:       cfg,
		memory:    make(map[string]peers.Record),
		reporters: make(map[string]uint32),
		skipped:   make(map[string]bool),
		settled:   make(chan struct{}),
		reopened:  make(chan struct{}),
	}
	if b.posted, err = held.CreatePosted(); err != nil {
		cfg.Log.Warn("completions that come by POST alone will not survive a restart", "err", err)
	} else {
		b.kept = true
	}
	b.outdated = map[string]time.Time{}
	var oerr, terr error
	b.oldRuns, oerr = held.CreateSuperseded()
	b.trigger, terr = held.CreateRestarting()
	if err := errors.Join(oerr, terr); err != nil {
		b.oldRuns.Close()
		b.trigger.Close()
		cfg.Log.Warn("which records an earlier run of the pod left will not survive a restart", "err", err)
	} else {
		b.oldKept = true
		old, errs := b.oldRuns.Load([]uint32{uint32(os.Geteuid())})
		for name, r := range old {
			b.outdated[name] = r.Time
		}
		warnOwn(cfg.Log, errs)
	}
	// Watched from now on, so that nothing written between the first read
	// and KeepCurrent goes unseen until a rescan.
	if b.notifier, err = cfg.Records.Notify(); err != nil {
		cfg.Log.Warn("cannot watch the records directory; changes are seen at the next rescan", "err", err, "rescan", cfg.Rescan)
	}
	return b, nil
}

// Close releases what the book holds: the caller closes the book, watched
// or not (KeepCurrent closes the notifier only when its ctx ends, not after
// Unwatch). A second Close is harmless.
func (b *Book) Close() {
	if b.notifier != nil {
		b.notifier.Close()
	}
	b.cfg.Records.Close()
	b.posted.Close()
	b.oldRuns.Close()
	b.trigger.Close()
}

// Unwatch stops the notifier's events for good, once nothing the records
// say can change what the supervisor does (its proxy is stopping, its exit
// code fixed): the kernel then destroys the watch in the background, while
// the proxy stops, instead of in the close that the supervisor's exit
// waits for. Reports and rescans still keep the book current.
func (b *Book) Unwatch() {
	if b.notifier == nil {
		return
	}
	if err := b.notifier.Unwatch(); err != nil {
		b.cfg.Log.Warn("stop watching the records directory", "err", err)
	}
}

// unlock releases mu, then tells Recorded of the final records seen under
// it: no callback runs under the book's lock.
func (b *Book) unlock() {
	told := b.told
	b.told = nil
	b.mu.Unlock()
	for _, r := range told {
		b.cfg.Recorded(r)
	}
}
