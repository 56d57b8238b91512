package completion

import (
	"context"
	"errors"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// The reading: the stores merged into the book, on a poke, a notifier's
// event or a rescan, and the records directory's path looked at again.

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
