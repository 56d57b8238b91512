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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

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
	Log      *slog.Logger
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

// Settled is closed once the records settle the policy: every expected peer
// succeeded, or a failure ended it (under Always, every expected peer
// ended). A verdict can come unsettled only where the proxy outlives it
// (Always, --native-sidecar): a restarted app marks its record running
// again. Then a later call returns a new channel, closed when the verdict
// settles again, so that a drain started after the restart waits for the
// app that runs now.
func (b *Book) Settled() <-chan struct{} {
	b.mu.Lock()
	defer b.unlock()
	return b.settled
}

// Next returns the verdict and a channel that is closed at its next turn:
// when an open verdict settles, or a settled one opens again (under Always
// or --native-sidecar, a restarted app that runs again).
func (b *Book) Next() (peers.Verdict, <-chan struct{}) {
	b.mu.Lock()
	defer b.unlock()
	if b.verdict.Settled {
		return b.verdict, b.reopened
	}
	return b.verdict, b.settled
}

// Verdict is the verdict of the last read.
func (b *Book) Verdict() peers.Verdict {
	b.mu.Lock()
	defer b.unlock()
	return b.verdict
}

// SettledAt is when the verdict first settled, or zero.
func (b *Book) SettledAt() time.Time {
	b.mu.Lock()
	defer b.unlock()
	return b.settledAt
}

// Load reads every store, merges them and applies the policy. why says what
// prompted the read, for the logs.
func (b *Book) Load(why string) peers.Verdict {
	b.mu.Lock()
	defer b.unlock()
	return b.load(why)
}

// load is Load with mu held. also names records to read whether or not the
// listing reaches them, as the book's known names are: the one whose report
// is being confirmed.
func (b *Book) load(why string, also ...string) peers.Verdict {
	b.checkReplaced()
	recs, errs := b.read(b.cfg.Records, b.cfg.AllowedUIDs, also)
	if b.kept {
		posted, perrs := b.read(b.posted, []uint32{uint32(os.Geteuid())}, also)
		for name, r := range posted {
			recs[name] = latest(recs[name], r)
		}
		errs = append(errs, perrs...)
	}
	for name, r := range b.memory {
		recs[name] = latest(recs[name], r)
	}
	b.logSkipped(errs)
	if !b.started {
		b.started = true
		b.supersede(recs)
	}
	return b.store(recs, why)
}

// policy is the configured policy with the records of earlier runs of the
// pod. The caller holds mu.
func (b *Book) policy() peers.Policy {
	p := b.cfg.Policy
	p.Superseded = b.outdated
	return p
}

// supersede runs at the supervisor's start. A record that makes the
// kubelet restart every container (a RestartAllContainers rule matched),
// kept by the previous supervisor when it saw it (keepTrigger) or still in
// peers/, means that this supervisor runs in a later run of the pod: the
// kubelet kills and removes every container before it starts the pod again
// from its init containers, so the run that wrote the record has ended, and
// with it the final records of its containers now on disk, the records of
// the peers it killed included. They all count as none from now on. The
// records of this run's containers that reported before this supervisor
// started (an app started before the proxy container, which reports with
// complete) are told apart by their container's start, later than the
// trigger (peers.EarlierRun), and count. The kept copy is what counts
// when the app's next run has already replaced the trigger (a classic
// sidecar's app may start before the supervisor has read anything, and
// mark its record running or report its end), and its time, the ended
// run's, is the one the records are held against: a trigger in peers/
// may be this run's own. The copies of the superseded records make that
// survive a restart of the proxy container alone; and once superseded, the
// trigger is no longer one and its kept copy is gone, so that a later lone
// restart supersedes nothing of the new run. The caller holds mu.
func (b *Book) supersede(recs map[string]peers.Record) {
	trigger, ok := b.policy().Restarts(recs)
	at := recs[trigger].Time
	var kept map[string]peers.Record
	if b.oldKept {
		var errs []error
		kept, errs = b.trigger.Load([]uint32{uint32(os.Geteuid())})
		warnOwn(b.cfg.Log, errs)
	}
	if len(kept) > 0 {
		// The ended run's trigger: one in peers/ may be this run's own.
		trigger, at, ok = "", time.Time{}, true
		for _, name := range slices.Sorted(maps.Keys(kept)) {
			if r := kept[name]; trigger == "" || r.Time.After(at) {
				trigger, at = name, r.Time
			}
		}
	}
	if !ok {
		return
	}
	var names, current []string
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		r := recs[name]
		if !peers.EarlierRun(r, at) {
			// A live exec of the new run, holding its lock, or a record
			// of a container of the new run.
			if r.Final() {
				current = append(current, name)
			}
			continue
		}
		r.Name = name
		b.outdated[name] = r.Time
		names = append(names, name)
		if !b.oldKept {
			continue
		}
		if err := b.oldRuns.Write(r); err != nil {
			b.cfg.Log.Warn("could not keep which records an earlier run of the pod left", "peer", name, "err", err)
		}
	}
	for name := range kept {
		if err := b.trigger.Remove(name); err != nil {
			b.cfg.Log.Warn("could not clear the record that restarted the pod", "peer", name, "err", err)
		}
	}
	b.cfg.Log.Info("the pod was restarted in place (RestartAllContainers); the earlier run's records no longer count",
		"trigger", trigger, "superseded", names, "this_run", current)
}

// warnOwn logs what a read of a directory of the supervisor's own skipped,
// which no peer can write in: logSkipped's summary is for peers/, and a
// call of it would reset what it has said.
func warnOwn(log *slog.Logger, errs []error) {
	if len(errs) > 0 {
		log.Warn("the supervisor's own records skipped", "skipped", len(errs), "first", errs[0])
	}
}

// keepTrigger keeps the record that restarts the whole pod, once per
// supervisor, for supersede at the start of the pod's next run. The caller
// holds mu.
func (b *Book) keepTrigger(recs map[string]peers.Record, name string) {
	if b.triggered || !b.oldKept {
		return
	}
	b.triggered = true
	r := recs[name]
	r.Name = name
	if err := b.trigger.Write(r); err != nil {
		b.cfg.Log.Warn("could not keep the record that restarts the pod; its next run may count this run's records", "peer", name, "err", err)
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

// Anyone is the caller of a report that did not come over the socket (the
// supervisor's own), which no ownership check applies to.
const Anyone int64 = -1

// NotOwnerError refuses a report for a peer whose record another uid owns.
type NotOwnerError struct {
	Peer          string
	Owner, Caller uint32
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("peer %s belongs to uid %d; uid %d may not report for it", e.Peer, e.Owner, e.Caller)
}

// Forbidden marks the error as a refusal of the caller, not bad input.
func (e *NotOwnerError) Forbidden() bool { return true }

// Report applies a completion that a peer reported over the socket, after
// checking it: an error means bad input or a caller that may not report
// for the peer, and changes nothing.
//
// The caller (a uid, from SO_PEERCRED) must own the peer's record, as the
// sticky records directory already demands of writers on disk; without a
// record on disk, the first uid to report for a name by POST owns it for
// this run. Root may report for any peer, since it could write any record.
//
// Only the peer's own record is read: a poke must not cost a read of every
// record, or a thousand peers reporting at once cost a million reads. That
// record normally says the same, having been written before the poke;
// otherwise the report came by POST alone and is kept in the posted store.
// A report that would settle the verdict is confirmed by a full read, since
// another peer's exec may have marked a new run since the last one, and a
// record from its earlier run must not end it.
func (b *Book) Report(report peers.Record, caller int64) (peers.Verdict, error) {
	r, err := b.check(report)
	if err != nil {
		return peers.Verdict{}, err
	}
	b.mu.Lock()
	defer b.unlock()
	if _, known := b.recs[r.Name]; !known && len(b.recs) >= NameLimit(b.cfg.Policy) {
		return peers.Verdict{}, fmt.Errorf("peer %s: the supervisor already keeps %d peer names, its bound (4 × the --peers count, at least %d)", r.Name, len(b.recs), MinNames)
	}
	d, ok, err := b.cfg.Records.Get(r.Name, b.cfg.AllowedUIDs)
	if err != nil {
		b.cfg.Log.Warn("completion record skipped", "err", err)
	}
	if caller > 0 {
		owner, owned := d.UID, ok
		if !owned {
			owner, owned = b.reporters[r.Name]
		}
		if owned && owner != uint32(caller) {
			return peers.Verdict{}, &NotOwnerError{Peer: r.Name, Owner: owner, Caller: uint32(caller)}
		}
	}
	// A record of the pod's earlier run says nothing of this one, even
	// when it says the same.
	if !ok || !d.Final() || d.ExitCode != r.ExitCode || d.Reason != r.Reason || !d.Stop.Equal(r.Stop) || b.policy().OfEarlierRun(r.Name, d) {
		b.keep(r)
		if caller >= 0 && !ok {
			b.reporters[r.Name] = uint32(caller)
		}
		d = r
	}
	return b.apply(r.Name, latest(b.recs[r.Name], d), "poke from "+r.Name), nil
}

// check turns a report into a final record, stamped now: the name must be
// one the policy accepts, the reason one a client may give (lost is the
// supervisor's to conclude), the code 0 to 255.
func (b *Book) check(report peers.Record) (peers.Record, error) {
	if err := b.cfg.Policy.Accepts(report.Name); err != nil {
		return peers.Record{}, err
	}
	r := peers.Record{Name: report.Name, ExitCode: report.ExitCode, Reason: report.Reason, Time: time.Now(), Stop: report.Stop}
	switch r.Reason {
	case "":
		r.Reason = peers.Exited
	case peers.Exited, peers.Signaled, peers.NotReady:
	default:
		return peers.Record{}, fmt.Errorf("reason %q: want exited, signaled or not-ready", report.Reason)
	}
	if err := r.Validate(); err != nil {
		return peers.Record{}, err
	}
	return r, nil
}

// keep stores a completion that came by POST alone: in memory, so that
// every later read counts it whether or not the disk could keep it, and on
// disk, so that it survives a restart of the proxy container.
func (b *Book) keep(r peers.Record) {
	b.memory[r.Name] = r
	if !b.kept {
		b.cfg.Log.Warn("completion came by POST alone and is not kept on disk", "peer", r.Name)
		return
	}
	if err := b.posted.Write(r); err != nil {
		// It still counts for this run; it just would not survive a
		// restart.
		b.cfg.Log.Warn("could not keep a posted completion on disk", "peer", r.Name, "err", err)
	}
}

// store replaces the book with recs, logs what changed and settles the
// verdict. The caller holds mu.
func (b *Book) store(recs map[string]peers.Record, why string) peers.Verdict {
	return b.storeDecided(recs, b.policy().Decide(recs), why)
}

// storeDecided is store with recs' verdict v already decided.
func (b *Book) storeDecided(recs map[string]peers.Record, v peers.Verdict, why string) peers.Verdict {
	old := b.recs
	b.recs, b.verdict, b.started = recs, v, true
	if v.PodRestart != "" {
		b.keepTrigger(recs, v.PodRestart)
	}
	policy := b.policy()
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		r := recs[name]
		r.Name = name
		if o, ok := old[name]; ok && o.Running == r.Running && o.ExitCode == r.ExitCode && o.Reason == r.Reason && o.Time.Equal(r.Time) {
			continue
		}
		if r.Running {
			b.cfg.Log.Info("peer running", "peer", name, "seen_at", why)
			continue
		}
		if policy.OfEarlierRun(name, r) {
			// Not a completion of this run: it decides nothing, and what
			// its code would make the kubelet do was done.
			b.cfg.Log.Info("peer's record is the pod's earlier run's (before RestartAllContainers); it decides nothing in this run",
				"peer", name, "exit_code", r.ExitCode, "reason", r.Reason, "seen_at", why)
			continue
		}
		b.cfg.Log.Info("peer completed", "peer", name, "exit_code", r.ExitCode, "reason", r.Reason, "seen_at", why)
		if b.cfg.Recorded != nil {
			b.told = append(b.told, r)
		}
		_, own := b.cfg.Policy.Peers[name]
		switch then := b.cfg.Policy.Then(name, r); {
		case then == peers.RestartAll:
			b.cfg.Log.Info("peer's exit restarts every container of the pod (RestartAllContainers, --peer-restart); keeping the proxy until SIGTERM", "peer", name, "exit_code", r.ExitCode)
		case own && then == peers.RestartAlone:
			b.cfg.Log.Info("peer's exit restarts it in place (--peer-restart); keeping the proxy for its restart", "peer", name, "exit_code", r.ExitCode)
		case b.cfg.Policy.Restart == peers.Always:
			b.cfg.Log.Info("peer ended; keeping the proxy for its restart (--restart-policy Always)", "peer", name, "exit_code", r.ExitCode)
		case then == peers.RestartAlone:
			b.cfg.Log.Warn("peer failed; keeping the proxy for its restart (--restart-policy OnFailure)", "peer", name, "exit_code", r.ExitCode)
		}
	}
	select {
	case <-b.settled:
		if !v.Settled {
			b.settled = make(chan struct{})
			close(b.reopened)
			b.reopened = make(chan struct{})
		}
	default:
		if v.Settled {
			if b.settledAt.IsZero() {
				b.settledAt = time.Now()
			}
			close(b.settled)
		}
	}
	return v
}

// logSkipped logs what a read skipped in one line, and only when it skipped
// something it had not skipped at the read before: a line per file, or per
// rescan, would let any container that plants files fill the log. The
// caller holds mu.
func (b *Book) logSkipped(errs []error) {
	seen := b.skipped
	b.skipped = make(map[string]bool, len(errs))
	var news []error
	for _, err := range errs {
		msg := err.Error()
		if !b.skipped[msg] && !seen[msg] {
			news = append(news, err)
		}
		b.skipped[msg] = true
	}
	if len(news) > 0 {
		b.cfg.Log.Warn("completion records skipped", "skipped", len(b.skipped), "new", len(news), "first", news[0])
	}
}

// read reads one store, only as far as the policy needs: the names it
// lists, or at most NameLimit directory entries, skipped ones included,
// and, when the listing was cut short, the names the book knows already. A
// read's cost therefore does not grow with what any container may plant in
// peers/ (writable by all), and what was planted ahead of a known record in
// directory order cannot make the book forget it. A whole listing has
// every record there is: a known name it lacks is asked for no more. The
// caller holds mu.
func (b *Book) read(d peers.Dir, allowed []uint32, also []string) (map[string]peers.Record, []error) {
	if len(b.cfg.Policy.Names) > 0 {
		return d.LoadNames(b.cfg.Policy.Names, allowed)
	}
	recs, errs, complete := d.LoadUpTo(allowed, NameLimit(b.cfg.Policy))
	if complete {
		return recs, errs
	}
	var missed []string
	for _, name := range append(slices.Collect(maps.Keys(b.recs)), also...) {
		if _, ok := recs[name]; !ok && !slices.Contains(missed, name) {
			missed = append(missed, name)
		}
	}
	more, merrs := d.LoadNames(missed, allowed)
	maps.Copy(recs, more)
	return recs, append(errs, merrs...)
}

func latest(a, b peers.Record) peers.Record {
	if b.Time.After(a.Time) {
		return b
	}
	return a
}

// KeepCurrent keeps the book current until ctx ends; the notifier is closed then,
// unless Unwatch ended its events first. The records directory's
// notifier reports each record that may have changed: a record written
// without a poke, and above all a running peer's lock released, since an
// exec killed with its app (memory.oom.group) writes nothing and the
// released lock is the only sign of it. Only that record is read then. A
// rescan of every record backs the notifier up, and stands in for it where
// inotify is not available.
func (b *Book) KeepCurrent(ctx context.Context) error {
	changed := make(chan string)
	if b.notifier != nil {
		go b.notified(ctx, b.notifier, changed)
	}
	t := time.NewTicker(b.cfg.Rescan)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case name := <-changed:
			if name == "" {
				b.Load("events lost")
			} else {
				b.Refresh(name)
			}
		case <-t.C:
			b.Load("rescan")
		}
	}
}

// notified passes the notifier's names on until ctx ends; "" means events
// were lost. It waits in Go's poller, not on a thread of its own.
func (b *Book) notified(ctx context.Context, n *peers.Notifier, changed chan<- string) {
	stop := context.AfterFunc(ctx, func() { n.Close() })
	defer stop()
	for {
		name, err := n.Next()
		switch {
		case errors.Is(err, peers.ErrOverflow):
			name = ""
		case errors.Is(err, peers.ErrUnwatched):
			return
		case err != nil:
			if ctx.Err() == nil {
				b.cfg.Log.Warn("watching the records directory stopped; changes are seen at the next rescan", "err", err)
			}
			return
		}
		select {
		case changed <- name:
		case <-ctx.Done():
			return
		}
	}
}

// Refresh reads one record again and applies it: the record of a name the
// notifier reported. A read that would settle the verdict is confirmed by a
// full read first, as a report is.
func (b *Book) Refresh(name string) peers.Verdict {
	b.mu.Lock()
	defer b.unlock()
	why := "change of " + name
	// A name the policy does not accept, or a new one past the bound, is
	// none of the book's business: any container can make files up.
	if _, known := b.recs[name]; !known && (b.cfg.Policy.Accepts(name) != nil || len(b.recs) >= NameLimit(b.cfg.Policy)) {
		return b.verdict
	}
	r, ok, err := b.cfg.Records.Get(name, b.cfg.AllowedUIDs)
	if err != nil || !ok {
		// Unreadable, or gone: the full read logs and drops it.
		return b.load(why)
	}
	if b.kept {
		if p, ok, _ := b.posted.Get(name, []uint32{uint32(os.Geteuid())}); ok {
			r = latest(r, p)
		}
	}
	return b.apply(name, latest(r, b.memory[name]), why)
}

// apply puts r in a copy of the book as name's record. A verdict that would
// settle is confirmed by a full read (load), since another peer's record
// may have changed since the last; otherwise the copy is stored. The caller
// holds mu.
func (b *Book) apply(name string, r peers.Record, why string) peers.Verdict {
	recs := maps.Clone(b.recs)
	if recs == nil {
		recs = make(map[string]peers.Record)
	}
	recs[name] = r
	v := b.policy().Decide(recs)
	if v.Settled {
		return b.load(why, name)
	}
	return b.storeDecided(recs, v, why)
}

// Peer is one peer as the book sees it, for the supervisor's status.
type Peer struct {
	Running  bool      `json:"running"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Time     time.Time `json:"time"`
}

// Running counts the peers whose record says they still run (under exec):
// what the drain and a native sidecar's SIGTERM ask, many times a second,
// without the status's copy of every record. While peers/ is replaced (see
// Replaced) a count of none is not known to be true, and err says why: an
// exec that started since writes its running record in the other
// directory. The path is looked at again whenever the count is none, the
// one answer that could end a drain.
func (b *Book) Running() (n int, err error) {
	b.mu.Lock()
	defer b.unlock()
	for _, r := range b.recs {
		if r.Running {
			n++
		}
	}
	if n == 0 {
		b.checkReplaced()
	}
	return n, b.replaced
}

// Replaced says, while it is so, that the path peers/ no longer names the
// records directory the book created and checked: another uid renamed it
// away (the control dir is writable by all and, under Istio, not sticky)
// and may have made its own there. The book goes on reading the one it
// holds, so no record written there before is lost, but what a client
// writes by the path now goes elsewhere; so it is an error, logged and
// shown, never "no peer runs". It is looked at on every full read (at
// least every rescan).
func (b *Book) Replaced() error {
	b.mu.Lock()
	defer b.unlock()
	return b.replaced
}

// checkReplaced looks at the path of peers/ again and logs a change. The
// caller holds mu.
func (b *Book) checkReplaced() {
	// Logged once each way: a uid that renames it back and forth must not
	// fill the log.
	err := b.cfg.Records.Replaced()
	switch {
	case err != nil && b.replaced == nil && !b.said[0]:
		b.said[0] = true
		b.cfg.Log.Error("the records directory was replaced; reading the one created at start, and no longer taking its lack of running peers for the app's end", "err", err)
	case err == nil && b.replaced != nil && !b.said[1]:
		b.said[1] = true
		b.cfg.Log.Info("the records directory is the one created at start again", "dir", b.cfg.Records.Path())
	}
	b.replaced = err
}

// Peers returns every peer with a record of this run of the pod, and the
// verdict.
func (b *Book) Peers() (map[string]Peer, peers.Verdict) {
	b.mu.Lock()
	defer b.unlock()
	out := make(map[string]Peer, len(b.recs))
	policy := b.policy()
	for name, r := range b.recs {
		if policy.OfEarlierRun(name, r) {
			continue // an earlier run's of the pod: it says nothing of this one
		}
		p := Peer{Running: r.Running, Time: r.Time}
		if !r.Running {
			code := r.ExitCode
			p.ExitCode, p.Reason = &code, string(r.Reason)
		}
		out[name] = p
	}
	return out, b.verdict
}
