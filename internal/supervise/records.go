package supervise

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// Rescan is how often the records are read without a poke. Pokes and lock
// releases are the fast path; this only backs them up, for a record written
// while no supervisor was listening to a poke.
const Rescan = time.Second

// book is what the completion records said when last read.
type book struct {
	recs      map[string]peers.Record
	verdict   peers.Verdict
	errs      map[string]bool // skipped files already logged
	settled   chan struct{}   // closed when the verdict first settles
	settledAt time.Time
}

// createPosted makes the store of completions that came by POST alone. A
// peer can plant something in its place (peers/ is writable by all); then
// such completions still count for this run but are not kept, rather than
// the supervisor failing to start.
func (s *Supervisor) createPosted() {
	if err := s.records.Posted().CreatePrivate(); err != nil {
		s.log.Warn("completions that come by POST alone will not survive a restart", "err", err)
		return
	}
	s.postedOK = true
}

// loadRecords reads every record, merges the posted ones (each name's latest
// counts) and applies the policy. Reads are serialized, so that a slow read
// never replaces the book with something older than a faster one stored.
func (s *Supervisor) loadRecords(why string) peers.Verdict {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	recs, errs := s.records.Load(s.cfg.AllowedUIDs)
	if s.postedOK {
		posted, perrs := s.records.Posted().Load([]uint32{uint32(os.Geteuid())})
		for name, r := range posted {
			recs[name] = latest(recs[name], r)
		}
		errs = append(errs, perrs...)
	}
	for name, r := range s.posted {
		recs[name] = latest(recs[name], r)
	}
	s.logSkipped(errs)
	return s.store(recs, why)
}

func latest(a, b peers.Record) peers.Record {
	if b.Time.After(a.Time) {
		return b
	}
	return a
}

// logSkipped logs each unreadable record once, not on every rescan.
func (s *Supervisor) logSkipped(errs []error) {
	s.mu.Lock()
	seen := s.book.errs
	s.book.errs = make(map[string]bool, len(errs))
	for _, err := range errs {
		s.book.errs[err.Error()] = true
	}
	s.mu.Unlock()
	for _, err := range errs {
		if !seen[err.Error()] {
			s.log.Warn("completion record skipped", "err", err)
		}
	}
}

// store replaces the book with recs, and logs and counts what changed. The
// caller holds recMu.
func (s *Supervisor) store(recs map[string]peers.Record, why string) peers.Verdict {
	v := s.cfg.Policy.Decide(recs)
	s.mu.Lock()
	old := s.book.recs
	s.book.recs, s.book.verdict = recs, v
	s.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		r := recs[name]
		if o, ok := old[name]; ok && o.Running == r.Running && o.ExitCode == r.ExitCode && o.Reason == r.Reason && o.Time.Equal(r.Time) {
			continue
		}
		if r.Running {
			s.log.Info("peer running", "peer", name, "seen_at", why)
			continue
		}
		s.log.Info("peer completed", "peer", name, "exit_code", r.ExitCode, "reason", r.Reason, "seen_at", why)
		s.m.completions.With(name, fmt.Sprint(r.ExitCode), string(r.Reason)).Inc()
		if r.Failed() {
			s.m.failures.With(name).Inc()
			if s.cfg.Policy.Wait {
				s.log.Warn("peer failed; keeping the proxy for its restart (--on-peer-failure=wait)", "peer", name, "exit_code", r.ExitCode)
			}
		}
	}
	return v
}

// settle acts on a settled verdict once: the code is fixed and the proxy
// stopped, except for a native sidecar, whose end is the kubelet's SIGTERM.
func (s *Supervisor) settle(v peers.Verdict) {
	if !v.Settled {
		return
	}
	s.mu.Lock()
	if s.book.settled == nil {
		s.book.settled = make(chan struct{})
	}
	select {
	case <-s.book.settled:
		s.mu.Unlock()
		return
	default:
	}
	close(s.book.settled)
	s.book.settledAt = time.Now()
	s.mu.Unlock()

	why := "every peer succeeded"
	if v.Failed != "" {
		why = fmt.Sprintf("peer %s failed with code %d", v.Failed, v.Code)
	}
	if !v.Done {
		s.log.Info("peers completed; a native sidecar waits for SIGTERM", "reason", why)
		return
	}
	s.out.decide(v.Code, why)
	s.requestStop(why)
}

// settledCh is closed once the records settle the job.
func (s *Supervisor) settledCh() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.book.settled == nil {
		s.book.settled = make(chan struct{})
	}
	return s.book.settled
}

// watchRecords reads the records on every tick and whenever a running peer's
// lock is released: an exec killed with its app (memory.oom.group) writes
// nothing, and the released lock is the only sign of it.
func (s *Supervisor) watchRecords(ctx context.Context) error {
	t := time.NewTicker(Rescan)
	defer t.Stop()
	watching := make(map[string]bool)
	released := make(chan string)
	for {
		for _, name := range s.running() {
			if watching[name] {
				continue
			}
			watching[name] = true
			go func() {
				if err := s.records.WatchLost(ctx, name); err != nil && ctx.Err() == nil {
					s.log.Warn("watching a running peer's lock", "peer", name, "err", err)
				}
				select {
				case released <- name:
				case <-ctx.Done():
				}
			}()
		}
		why := "rescan"
		select {
		case <-ctx.Done():
			return nil
		case name := <-released:
			delete(watching, name)
			why = "lock released by " + name
		case <-t.C:
		}
		s.settle(s.loadRecords(why))
	}
}

func (s *Supervisor) running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for name, r := range s.book.recs {
		if r.Running {
			names = append(names, name)
		}
	}
	return names
}

// Complete is POST /v1/complete. The peer's own record is normally on disk
// already (complete and exec write it before they poke); a completion that
// arrives by POST alone is recorded here, so that it too survives a restart.
func (s *Supervisor) Complete(peer string, code int, reason string) error {
	if err := peers.ValidName(peer); err != nil {
		return err
	}
	if err := s.cfg.Policy.Accepts(peer); err != nil {
		return err
	}
	r := peers.Record{Name: peer, ExitCode: code, Reason: peers.Reason(reason), Time: time.Now()}
	switch r.Reason {
	case "":
		r.Reason = peers.Exited
	case peers.Exited, peers.Signaled, peers.NotReady:
	default:
		return fmt.Errorf("reason %q: want exited, signaled or not-ready", reason)
	}
	if err := r.Validate(); err != nil {
		return err
	}
	v := s.record(r)
	if v.Settled {
		// The fast path read only this peer's record; before the job is
		// declared over, read them all. Another peer's exec may have marked
		// a new run since the last full read, and a record from its earlier
		// run must not end it.
		v = s.loadRecords("poke from " + r.Name)
	}
	s.settle(v)
	return nil
}

// record applies one reported completion. Only the peer's own record is read
// (a poke must not cost a read of every record, or a thousand peers
// reporting at once cost a million reads); it normally says the same, having
// been written before the poke. Otherwise the report came by POST alone and
// is kept in posted/.
func (s *Supervisor) record(r peers.Record) peers.Verdict {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	d, ok, err := s.records.Get(r.Name, s.cfg.AllowedUIDs)
	if err != nil {
		s.log.Warn("completion record skipped", "err", err)
	}
	if !ok || !d.Final() || d.ExitCode != r.ExitCode || d.Reason != r.Reason {
		// Kept in memory too, so that every later read of the disk counts
		// it, whether or not it could be kept on disk.
		s.posted[r.Name] = r
		if !s.postedOK {
			s.log.Warn("completion came by POST alone and is not kept on disk", "peer", r.Name)
		} else if err := s.records.Posted().Write(r); err != nil {
			// The report still counts for this run; it just would not
			// survive a restart.
			s.log.Warn("could not keep a posted completion on disk", "peer", r.Name, "err", err)
		}
		d = r
	}
	s.mu.Lock()
	recs := maps.Clone(s.book.recs)
	s.mu.Unlock()
	if recs == nil {
		recs = make(map[string]peers.Record)
	}
	recs[r.Name] = latest(recs[r.Name], d)
	return s.store(recs, "poke from "+r.Name)
}

// peerStatus is one peer in /v1/status.
type peerStatus struct {
	Running  bool      `json:"running"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Time     time.Time `json:"time"`
}

func (s *Supervisor) peerStatuses() (map[string]peerStatus, []string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]peerStatus, len(s.book.recs))
	for name, r := range s.book.recs {
		ps := peerStatus{Running: r.Running, Time: r.Time}
		if !r.Running {
			code := r.ExitCode
			ps.ExitCode, ps.Reason = &code, string(r.Reason)
		}
		out[name] = ps
	}
	return out, s.book.verdict.Pending, s.book.verdict.Awaiting
}
