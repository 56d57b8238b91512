package envoy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Default poll intervals: fast while the proxy starts, so that readiness is
// noticed within milliseconds, and once a second when ready, which bounds how
// stale a ready answer can be.
const (
	DefaultStartEvery = 10 * time.Millisecond
	DefaultReadyEvery = time.Second
)

// TrackerConfig is how a Tracker polls.
type TrackerConfig struct {
	// Strict: LIVE is not enough. Like pilot-agent, also want CDS and LDS
	// to have been applied and the workers started, because an Envoy fed
	// by xDS reaches LIVE without any config once its initial fetch times
	// out.
	Strict bool
	// ExtraReady, if set, is another readiness check asked once Envoy is ready
	// (ReadyURL.Check): "" when ready too, else why not. It is bounded by
	// the poll's context.
	ExtraReady func(ctx context.Context) string
	// StartEvery and ReadyEvery are the poll intervals before and after
	// readiness; zero means the defaults.
	StartEvery, ReadyEvery time.Duration
	// Silence is how long a GET /ready may wait for its answer before the
	// admin API counts as silent; zero means the admin client's Timeout.
	// A poll stops waiting at its own bound (0.9 × ReadyEvery) and reads
	// not ready, but the request goes on, and an answer within Silence,
	// however late for readiness, still proves Envoy alive (LastAnswer):
	// a main thread busy with a large xDS push is slow, not hung.
	Silence time.Duration
	// Keep: the tracker keeps every change, in order, for Changes to take.
	// A reader that must see each one (a refusal that another status
	// followed at once, a readiness that did not last) reads them there;
	// Status has only the latest.
	Keep bool
}

// Change is one change of the tracker's status, and when it was seen.
type Change struct {
	Old, Now Status
	At       time.Time
}

// Status is what the tracker last saw.
type Status struct {
	Ready  bool
	Reason string // Envoy's state name, or why the admin API gave none
	Down   bool   // nothing listens on the admin port: Envoy is not running
}

// Tracker polls the admin API and publishes every change of readiness.
type Tracker struct {
	admin *Admin
	live  *Admin // admin, with Silence for its bound
	cfg   TrackerConfig
	// A poll must end before the next one is due, so that a ready answer
	// is never older than ReadyEvery; slow is the status of one that could
	// not. Both are fixed by the config: the poll does not format its
	// reason every 10 ms.
	bound time.Duration
	slow  Status

	// The GET /ready still awaited, if any, and when it was sent; only
	// Run's goroutine touches them. One at a time: a slow Envoy is not
	// sent more work while it is behind.
	pending chan answer
	sent    time.Time

	mu         sync.Mutex
	status     Status
	changed    chan struct{} // closed at the next change, then replaced
	gone       bool          // the proxy has exited: nothing may make it ready again
	kept       []Change      // with Keep, the changes Changes has not taken yet
	lastAnswer time.Time     // the admin API's last answer, whatever it said
}

// NewTracker returns a tracker of the proxy behind admin. It polls nothing
// until Run.
func NewTracker(admin *Admin, cfg TrackerConfig) *Tracker {
	if cfg.StartEvery <= 0 {
		cfg.StartEvery = DefaultStartEvery
	}
	if cfg.ReadyEvery <= 0 {
		cfg.ReadyEvery = DefaultReadyEvery
	}
	live := *admin
	live.Timeout = max(admin.Timeout, cfg.Silence)
	bound := cfg.ReadyEvery * 9 / 10
	return &Tracker{
		admin:   admin,
		live:    &live,
		cfg:     cfg,
		bound:   bound,
		slow:    Status{Reason: fmt.Sprintf("admin API does not answer within %v", bound)},
		status:  Status{Reason: "proxy starting"},
		changed: make(chan struct{}),
	}
}

// Status returns the current status and a channel that is closed when it
// changes. Waiters select on the channel: no polling, no busy loop.
func (t *Tracker) Status() (Status, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status, t.changed
}

// Changes takes the changes kept since it was last called (TrackerConfig.Keep),
// oldest first, and returns with them a channel that is closed at the next
// change. It is for one reader, which calls it again once the channel is
// closed: nothing is lost between the calls.
func (t *Tracker) Changes() ([]Change, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := t.kept
	t.kept = nil
	return kept, t.changed
}

// LastAnswer is when the admin API last answered a poll, with any status;
// zero before its first answer. A hung Envoy accepts connections and
// answers nothing, so it is ready no longer, and this stops moving.
func (t *Tracker) LastAnswer() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastAnswer
}

// Gone records that the proxy exited, with why. It is final: readiness is
// withdrawn at once rather than at the next failed poll.
func (t *Tracker) Gone(why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.gone {
		t.update(Status{Reason: why})
		t.gone = true
	}
}

// set publishes what a poll saw, unless the proxy is gone: Gone's status is
// final, and a poll that was under way when it came says nothing new.
func (t *Tracker) set(s Status) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.gone {
		t.update(s)
	}
}

// update publishes s if it is a change. The caller holds mu.
func (t *Tracker) update(s Status) {
	if s == t.status {
		return
	}
	if t.cfg.Keep {
		t.kept = append(t.kept, Change{Old: t.status, Now: s, At: time.Now()})
	}
	t.status = s
	close(t.changed)
	t.changed = make(chan struct{})
}

// Run polls until ctx ends.
func (t *Tracker) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		t.mu.Lock()
		gone := t.gone
		t.mu.Unlock()
		if gone {
			return nil
		}
		s := t.poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		t.set(s)
		if s.Ready {
			timer.Reset(t.cfg.ReadyEvery)
		} else {
			timer.Reset(t.cfg.StartEvery)
		}
	}
}

// answer is what a GET /ready came back with, and when.
type answer struct {
	state string
	ready bool
	err   error
	at    time.Time
}

func (t *Tracker) poll(ctx context.Context) Status {
	if st, _ := t.Status(); st.Down && t.pending == nil {
		if bound, err := t.admin.Listening(ctx); err == nil && !bound {
			return st
		}
	}
	// The poll is bounded by t.bound; its request may outlive it (ask).
	bound, slow := t.bound, t.slow
	pctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if t.pending == nil {
		t.pending, t.sent = t.ask(ctx), time.Now()
	}
	var a answer
	select {
	case a = <-t.pending:
		t.pending = nil
	case <-pctx.Done():
		return slow
	}
	switch {
	case Refused(a.err):
		return Status{Reason: "admin API refuses connections", Down: true}
	case errors.Is(a.err, context.DeadlineExceeded):
		return slow
	case a.err != nil:
		return Status{Reason: a.err.Error()}
	case a.at.Sub(t.sent) > bound:
		// Alive (LastAnswer moved), but the answer is older than a ready
		// one may be.
		return slow
	case !a.ready:
		return Status{Reason: a.state}
	}
	if t.cfg.Strict {
		if why := t.configured(pctx); why != "" {
			return Status{Reason: why}
		}
	}
	if t.cfg.ExtraReady != nil {
		if why := t.cfg.ExtraReady(pctx); why != "" {
			return Status{Reason: why}
		}
	}
	return Status{Ready: true, Reason: a.state}
}

// ask sends GET /ready and delivers its answer on the returned channel,
// bounded by Silence rather than by the poll that sent it. Any answer, a
// 503 or an unexpected status included, moves LastAnswer when it arrives.
func (t *Tracker) ask(ctx context.Context) chan answer {
	ch := make(chan answer, 1)
	go func() {
		state, ready, err := t.live.ServerState(ctx)
		now := time.Now()
		var se *StatusError
		if err == nil || errors.As(err, &se) {
			t.mu.Lock()
			t.lastAnswer = now
			t.mu.Unlock()
		}
		ch <- answer{state, ready, err, now}
	}()
	return ch
}

// configured says what is missing before an xDS-fed Envoy has real config, or
// "" when nothing is.
func (t *Tracker) configured(ctx context.Context) string {
	stats, err := t.admin.Stats(ctx, `(cds\.update_success|lds\.update_success|workers_started)$`)
	if err != nil {
		return err.Error()
	}
	var missing []string
	for _, want := range []string{"cds.update_success", "lds.update_success", "workers_started"} {
		found := false
		for name, v := range stats {
			if strings.HasSuffix(name, want) && v > 0 {
				found = true
			}
		}
		if !found {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("LIVE but no %s yet", strings.Join(missing, ", "))
	}
	return ""
}
