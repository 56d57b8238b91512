package completion

import (
	"maps"
	"slices"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// The verdict: what the book stores and says, for the restart policy, the
// drain and the status.

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
				b.settledAt = b.cfg.Clock.Now()
			}
			close(b.settled)
		}
	}
	return v
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
