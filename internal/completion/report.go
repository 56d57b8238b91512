package completion

import (
	"fmt"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// The reports that come over the socket: checked, owned, and kept when
// they came by POST alone.

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
