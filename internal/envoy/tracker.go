package envoy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock"
	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
)

// Default poll intervals: fast while the proxy starts, so that readiness is
// noticed within milliseconds, and once a second when ready, which bounds how
// stale a ready answer can be while Envoy answers.
const (
	DefaultStartEvery = 10 * time.Millisecond
	DefaultReadyEvery = time.Second
)

// DefaultHold is how long a proxy that is ready stays so while its admin
// API gives no answer. One late answer (a loaded node, a main thread busy
// with an xDS push or a stats dump) is no sign that Envoy cannot carry
// traffic, and a 503 takes the pod out of its Service (issue 35: healthy
// pods turned unready at each poll past 0.9 s). 3 s is the timeoutSeconds
// of the readiness probe that Istio injects and of deploy/envoy-sidecar's
// Deployment, what the kubelet waits for our own answer before it counts a
// failure; it is three polls of a ready proxy; and it is small beside
// --hung-after (30 s) and beside what the kubelet takes to act on a 503
// (Istio's probe: 4 failures 15 s apart; the Deployment's: 3 failures 2 s
// apart), so a frozen Envoy leaves its endpoints about as soon as before.
const DefaultHold = 3 * time.Second

// TrackerConfig is how a Tracker polls.
type TrackerConfig struct {
	// Strict: LIVE is not enough. Like pilot-agent, also want CDS and LDS
	// to have been applied and the workers started, because an Envoy fed
	// by xDS reaches LIVE without any config once its initial fetch times
	// out.
	Strict bool
	// ExtraReady, if set, is another readiness check asked once Envoy is ready
	// (ReadyURL.Check): "" when ready too, else why not. It is bounded by
	// the poll's context, a ready proxy's by a bound of its own, and one
	// that ran out of it is no answer (Hold).
	ExtraReady func(ctx context.Context) string
	// StartEvery and ReadyEvery are the poll intervals before and after
	// readiness; zero means the defaults.
	StartEvery, ReadyEvery time.Duration
	// Hold is how long a proxy that is ready stays ready while it gets no
	// answer: from the first request that went unanswered, through a poll
	// past its bound, a request that timed out, or a check (Strict,
	// ExtraReady) that ran out of time. Zero means DefaultHold; it is never
	// less than a poll's bound. A proxy that is not ready, before its first
	// readiness or after one was withdrawn, must answer within the poll's
	// bound to become ready: the start gate stays strict.
	Hold time.Duration
	// Silence is how long a GET /ready may wait for its answer before the
	// admin API counts as silent; zero means the admin client's Timeout.
	// A poll stops waiting at its own bound (0.9 × ReadyEvery), or a ready
	// proxy's at the end of its Hold, but the request goes on, and an
	// answer within Silence, however late for readiness, still proves
	// Envoy alive (LastAnswer): a main thread busy with a large xDS push
	// is slow, not hung.
	Silence time.Duration
	// Clock is the tracker's time: its poll intervals and bounds, the
	// hold, and the instants of its changes and answers; nil means the
	// system's. The requests' own timeouts are the system's.
	Clock clock.Clock
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
	clk   clock.Clock
	// Before readiness a poll must end before the next one is due, so that
	// the first ready answer is never older than ReadyEvery; slow is the
	// status of one that could not. A ready proxy stays ready through
	// hold without an answer; silent is its status after that. All are
	// fixed by the config: the poll does not format its reason every 10 ms.
	bound, hold  time.Duration
	slow, silent Status

	// The GET /ready still awaited, if any, and when it was sent (a first
	// readiness must come within the bound of it); only Run's goroutine
	// touches them. One at a time: a slow Envoy is not sent more work
	// while it is behind.
	pending chan answer
	sent    time.Time
	// quiet is when the first request went out that has had no answer
	// deciding the status since (zero when the last one decided it): the
	// start of the silence that a ready proxy's hold measures. Run's
	// goroutine alone touches it.
	quiet time.Time

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
	if cfg.Hold <= 0 {
		cfg.Hold = DefaultHold
	}
	live := *admin
	live.Timeout = max(admin.Timeout, cfg.Silence)
	bound := cfg.ReadyEvery * 9 / 10
	hold := max(cfg.Hold, bound)
	return &Tracker{
		admin:   admin,
		live:    &live,
		cfg:     cfg,
		clk:     clock.Or(cfg.Clock),
		bound:   bound,
		hold:    hold,
		slow:    Status{Reason: fmt.Sprintf("admin API does not answer within %v", bound)},
		silent:  Status{Reason: fmt.Sprintf("admin API does not answer within %v", hold)},
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

// Silence is how long the admin API has not answered, on the tracker's
// clock: zero before its first answer.
func (t *Tracker) Silence() time.Duration {
	t.mu.Lock()
	last := t.lastAnswer
	t.mu.Unlock()
	if last.IsZero() {
		return 0
	}
	return t.clk.Now().Sub(last)
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
		t.kept = append(t.kept, Change{Old: t.status, Now: s, At: t.clk.Now()})
	}
	t.status = s
	close(t.changed)
	t.changed = make(chan struct{})
}

// Run polls until ctx ends.
func (t *Tracker) Run(ctx context.Context) error {
	timer := t.clk.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
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
		// A ready proxy held without an answer is asked again at once:
		// the hold is for an answer that is late, not for one not asked.
		if s.Ready && t.quiet.IsZero() {
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

// poll asks Envoy, or takes the answer to what it asked before, and says
// what the status is now. While the proxy is not ready (it starts, or its
// readiness was withdrawn), readiness needs a LIVE answer within the poll's
// bound: today's start gate. Once it is ready, only evidence withdraws it:
// an answer that is not LIVE, an error answer, a refused connection (and
// Gone) at once; no answer at all after hold. A late LIVE answer is an
// answer: Envoy's main thread, busy with an xDS push or a stats dump,
// answers late while its workers carry the traffic.
func (t *Tracker) poll(ctx context.Context) Status {
	cur, _ := t.Status()
	if cur.Down && t.pending == nil {
		if bound, err := t.admin.Listening(ctx); err == nil && !bound {
			return cur
		}
	}
	now := t.clk.Now()
	if t.pending == nil {
		t.pending, t.sent = t.ask(ctx), now
		if t.quiet.IsZero() {
			t.quiet = now
		}
	}
	// The poll is bounded by t.bound, a ready proxy's by the end of its
	// hold; its request may outlive it (ask).
	held := cur.Ready
	wait := t.bound
	if held {
		wait = t.quiet.Add(t.hold).Sub(now)
	}
	pctx, cancel := clock.WithTimeout(ctx, t.clk, max(wait, 0))
	defer cancel()
	var a answer
	select {
	case a = <-t.pending: // an answer that came between polls is taken first
	default:
		select {
		case a = <-t.pending:
		case <-pctx.Done():
			// An answer there as the bound passes is an answer: a select
			// that finds both ready picks one at random.
			select {
			case a = <-t.pending:
			default:
				return t.unanswered(cur)
			}
		}
	}
	t.pending = nil
	switch {
	case Refused(a.err):
		t.quiet = time.Time{}
		return Status{Reason: "admin API refuses connections", Down: true}
	case timedOut(a.err):
		return t.unanswered(cur)
	case a.err != nil:
		t.quiet = time.Time{}
		return Status{Reason: a.err.Error()}
	case !held && a.at.Sub(t.sent) > t.bound:
		// Alive (LastAnswer moved), but the answer is older than a first
		// ready one may be.
		return t.slow
	case !a.ready:
		t.quiet = time.Time{}
		return Status{Reason: a.state}
	}
	// A ready proxy's late answer leaves its checks little of the poll's
	// time: they get a bound of their own.
	cctx := pctx
	if held {
		c, cancel := clock.WithTimeout(ctx, t.clk, t.bound)
		defer cancel()
		cctx = c
	}
	why := ""
	if t.cfg.Strict {
		why = t.configured(cctx)
	}
	if why == "" && t.cfg.ExtraReady != nil {
		why = t.cfg.ExtraReady(cctx)
	}
	if why != "" {
		// Out of time is no answer, which a ready proxy's hold covers.
		if cctx.Err() != nil && t.holding(cur) {
			return cur
		}
		t.quiet = time.Time{}
		return Status{Reason: why}
	}
	t.quiet = time.Time{}
	return Status{Ready: true, Reason: a.state}
}

// holding reports whether cur is a readiness that the hold still covers:
// ready, and without an answer for less than hold.
func (t *Tracker) holding(cur Status) bool {
	return cur.Ready && t.clk.Now().Sub(t.quiet) < t.hold
}

// unanswered is the status after a poll that got no answer in time: a ready
// proxy's is unchanged until its hold is over, and then silent; a proxy
// not ready yet is slow.
func (t *Tracker) unanswered(cur Status) Status {
	switch {
	case t.holding(cur):
		return cur
	case cur.Ready:
		return t.silent
	}
	return t.slow
}

// timedOut reports whether err is a request that ran out of time: no
// answer, as opposed to an answer or a broken connection.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

// ask sends GET /ready and delivers its answer on the returned channel,
// bounded by Silence rather than by the poll that sent it. Any answer, a
// 503, an unexpected status or one too long to read included, moves
// LastAnswer when it arrives.
func (t *Tracker) ask(ctx context.Context) chan answer {
	ch := make(chan answer, 1)
	go func() {
		state, ready, err := t.live.ServerState(ctx)
		now := t.clk.Now()
		var se *StatusError
		if err == nil || errors.As(err, &se) || errors.Is(err, http1.ErrTooLarge) {
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
