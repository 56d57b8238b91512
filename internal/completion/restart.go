package completion

import (
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// The pod's restart in place (RestartAllContainers): its trigger kept, and
// an earlier run's records set aside at the start of the next.

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
