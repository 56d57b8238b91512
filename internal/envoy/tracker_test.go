package envoy

// The tracker's readiness rule on a fake clock (issue 35): before the first
// readiness, a LIVE answer within the poll's bound is needed (the start
// gate); once ready, only evidence withdraws it: an answer that is not
// LIVE, an error answer, at once; no answer at all, after the hold. Each
// test moves the tracker's time itself, once the tracker has armed the
// timer it means to fire, so that every bound is seen at its instant.

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock/clocktest"
)

// within bounds the real time a test waits for the tracker to act.
const within = 5 * time.Second

// heldAdmin is an admin API whose GET /ready answers what the test set, and
// while it is held, only once the test lets it go, as an Envoy whose main
// thread is busy answers late.
type heldAdmin struct {
	mu      sync.Mutex
	code    int
	body    string
	gate    chan struct{} // non-nil: a request waits until it is closed
	arrived chan struct{} // a request has arrived
}

func (h *heldAdmin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	gate := h.gate
	h.mu.Unlock()
	select {
	case h.arrived <- struct{}{}:
	default:
	}
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	h.mu.Lock()
	code, body := h.code, h.body
	h.mu.Unlock()
	w.WriteHeader(code)
	io.WriteString(w, body)
}

// answer sets what the next answers say.
func (h *heldAdmin) answer(code int, body string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.code, h.body = code, body
}

// hold makes the requests from now on wait, until release.
func (h *heldAdmin) hold() (release func()) {
	gate := make(chan struct{})
	h.mu.Lock()
	h.gate = gate
	h.mu.Unlock()
	select { // an arrival before the hold says nothing of what is held
	case <-h.arrived:
	default:
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			if h.gate == gate {
				h.gate = nil
			}
			h.mu.Unlock()
			close(gate)
		})
	}
}

// requested waits until a request has arrived.
func (h *heldAdmin) requested(t *testing.T) {
	t.Helper()
	select {
	case <-h.arrived:
	case <-time.After(within):
		t.Fatal("the tracker sent no request")
	}
}

// newHeldAdmin is a heldAdmin that answers LIVE.
func newHeldAdmin() *heldAdmin {
	return &heldAdmin{code: 200, body: "LIVE\n", arrived: make(chan struct{}, 1)}
}

// runTracker runs a tracker of h on clk, with Keep; the test's end stops it.
func runTracker(t *testing.T, clk *clocktest.Fake, cfg TrackerConfig, h *heldAdmin) *Tracker {
	t.Helper()
	a, _, _ := adminOf(t, h.ServeHTTP)
	cfg.Clock, cfg.Keep = clk, true
	tr := NewTracker(a, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return tr
}

// waitStatus waits until the tracker's status is want.
func waitStatus(t *testing.T, tr *Tracker, want Status) {
	t.Helper()
	deadline := time.After(within)
	for {
		st, changed := tr.Status()
		if st == want {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("status %+v, want %+v", st, want)
		}
	}
}

// moveTo fails the test unless the tracker arms a timer for what at at,
// and then moves clk there.
func moveTo(t *testing.T, clk *clocktest.Fake, what string, at time.Time) {
	t.Helper()
	armed(t, clk, what, at)
	clk.Advance(at.Sub(clk.Now()))
}

// armed fails the test unless the tracker arms a timer for what at at.
func armed(t *testing.T, clk *clocktest.Fake, what string, at time.Time) {
	t.Helper()
	if !clk.WaitArmed(at, within) {
		t.Fatalf("no timer armed for %s at %v; armed at %v", what, at, clk.Armed())
	}
}

// nextTimer waits until the tracker has armed a timer, its poll's bound.
func nextTimer(t *testing.T, clk *clocktest.Fake) time.Time {
	t.Helper()
	at, ok := clk.Next(within)
	if !ok {
		t.Fatal("the poll armed no timer")
	}
	return at
}

// wantChanges fails the test unless the changes the tracker kept are to
// want, each at its instant.
func wantChanges(t *testing.T, tr *Tracker, want []Change) {
	t.Helper()
	got, _ := tr.Changes()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = got[i].Now == want[i].Now && got[i].At.Equal(want[i].At)
	}
	if !ok {
		t.Fatalf("changes:\n%s\nwant:\n%s", changeList(got), changeList(want))
	}
}

func changeList(cs []Change) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString("\t" + c.At.Format("15:04:05.000") + " " + c.Now.Reason)
		if c.Now.Ready {
			b.WriteString(" (ready)")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

var live = Status{Ready: true, Reason: "LIVE"}

// readyAt starts the tracker and waits for its first readiness, which its
// first poll finds at t0; the next poll is due at t0 + ReadyEvery.
func readyAt(t *testing.T, clk *clocktest.Fake, cfg TrackerConfig) (*Tracker, *heldAdmin, time.Time) {
	t.Helper()
	t0 := clk.Now()
	h := newHeldAdmin()
	tr := runTracker(t, clk, cfg, h)
	waitStatus(t, tr, live)
	return tr, h, t0
}

// One answer past the poll's bound, once the proxy is ready, leaves it
// ready: the answer is late, and LIVE. (The tracker turned it unready at
// the bound, 0.9 s after the request, and ready again at the next prompt
// answer: 503s that took healthy pods out of their Service.)
func TestTrackerStaysReadyThroughOneLateAnswer(t *testing.T) {
	clk := clocktest.New()
	tr, h, t0 := readyAt(t, clk, TrackerConfig{})
	release := h.hold()
	defer release()
	sent := t0.Add(time.Second)
	moveTo(t, clk, "the ready poll", sent)
	h.requested(t)
	nextTimer(t, clk)
	clk.Advance(1500 * time.Millisecond) // past the bound, 0.9 s
	release()
	// The poll took the late answer as ready: the next is a second on.
	// The clock stays here, so that the answer read below is the late
	// one's: moved on, the next poll may answer first (beside a CPU hog,
	// it did).
	armed(t, clk, "the poll after the late answer", sent.Add(2500*time.Millisecond))
	wantChanges(t, tr, []Change{{Now: live, At: t0}})
	if last := tr.LastAnswer(); !last.Equal(sent.Add(1500 * time.Millisecond)) {
		t.Errorf("last answer at %v, want the late one's %v", last, sent.Add(1500*time.Millisecond))
	}
	// Silence counts from that answer, on the tracker's clock.
	if got := tr.Silence(); got != 0 {
		t.Errorf("silence at the answer = %v, want 0", got)
	}
}

// Silence is zero until the admin API first answers: a proxy that never
// answered has not gone silent.
func TestTrackerSilenceBeforeAnyAnswer(t *testing.T) {
	clk := clocktest.New()
	h := newHeldAdmin()
	release := h.hold()
	defer release()
	tr := runTracker(t, clk, TrackerConfig{}, h)
	h.requested(t)
	clk.Advance(time.Hour)
	if got := tr.Silence(); got != 0 {
		t.Errorf("silence with no answer yet = %v, want 0", got)
	}
}

// An admin API that gives no answer at all for the hold (3 s from the
// request) is taken as a proxy that cannot carry traffic, at that instant
// and not before. Its late LIVE answer then does not make it ready: a
// proxy that is not ready must answer within the bound again.
func TestTrackerWithdrawsReadinessAfterTheHold(t *testing.T) {
	clk := clocktest.New()
	tr, h, t0 := readyAt(t, clk, TrackerConfig{})
	release := h.hold()
	defer release()
	sent := t0.Add(time.Second)
	moveTo(t, clk, "the ready poll", sent)
	h.requested(t)
	end := sent.Add(DefaultHold)
	if at := nextTimer(t, clk); !at.Equal(end) {
		t.Fatalf("the poll of a ready proxy waits until %v after its request, want the hold's %v", at.Sub(sent), DefaultHold)
	}
	clk.Advance(end.Sub(clk.Now()) - time.Millisecond)
	if st, _ := tr.Status(); st != live {
		t.Fatalf("status %+v a millisecond before the hold's end, want ready", st)
	}
	clk.Advance(time.Millisecond)
	silent := Status{Reason: "admin API does not answer within 3s"}
	waitStatus(t, tr, silent)
	// Silent since the answer that made it ready (what --hung-after reads).
	if got := tr.Silence(); got != end.Sub(t0) {
		t.Errorf("silence at the hold's end = %v, want %v", got, end.Sub(t0))
	}
	release()
	moveTo(t, clk, "the poll after the withdrawal", end.Add(DefaultStartEvery))
	slow := Status{Reason: "admin API does not answer within 900ms"}
	waitStatus(t, tr, slow)
	moveTo(t, clk, "the next poll", end.Add(2*DefaultStartEvery))
	waitStatus(t, tr, live)
	wantChanges(t, tr, []Change{
		{Now: live, At: t0},
		{Now: silent, At: end},
		{Now: slow, At: end.Add(DefaultStartEvery)},
		{Now: live, At: end.Add(2 * DefaultStartEvery)},
	})
}

// An answer that is not LIVE, or an answer of failure, withdraws readiness
// at once, whether it comes at once or late: it is evidence, which the
// hold is not for.
func TestTrackerWithdrawsReadinessAtANonLiveAnswer(t *testing.T) {
	for _, tt := range []struct {
		name   string
		code   int
		body   string
		reason string
		late   bool
	}{
		{"DRAINING", 503, "DRAINING\n", "DRAINING", false},
		{"PRE_INITIALIZING", 503, "PRE_INITIALIZING\n", "PRE_INITIALIZING", false},
		{"an error answer", 500, "internal error\n", "admin /ready: 500 internal error", false},
		{"a late DRAINING", 503, "DRAINING\n", "DRAINING", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New()
			tr, h, t0 := readyAt(t, clk, TrackerConfig{})
			h.answer(tt.code, tt.body)
			sent := t0.Add(time.Second)
			at := sent
			if tt.late {
				release := h.hold()
				defer release()
				moveTo(t, clk, "the ready poll", sent)
				h.requested(t)
				nextTimer(t, clk)
				clk.Advance(1500 * time.Millisecond)
				at = clk.Now()
				release()
			} else {
				moveTo(t, clk, "the ready poll", sent)
			}
			not := Status{Reason: tt.reason}
			waitStatus(t, tr, not)
			wantChanges(t, tr, []Change{{Now: live, At: t0}, {Now: not, At: at}})
		})
	}
}

// Before the first readiness nothing changes: a poll that has no answer
// within its bound (0.9 s) reads not ready at the bound, a late LIVE answer
// is not taken, and the first prompt one is.
func TestTrackerStartGateIsStrict(t *testing.T) {
	clk := clocktest.New()
	t0 := clk.Now()
	h := newHeldAdmin()
	release := h.hold()
	defer release()
	tr := runTracker(t, clk, TrackerConfig{}, h)
	h.requested(t)
	bound := t0.Add(900 * time.Millisecond)
	moveTo(t, clk, "the poll's bound", bound)
	slow := Status{Reason: "admin API does not answer within 900ms"}
	waitStatus(t, tr, slow)
	// The next poll takes the late LIVE: still not ready, and polled again
	// at once.
	moveTo(t, clk, "the next poll", bound.Add(DefaultStartEvery))
	release()
	armed(t, clk, "the poll after the late answer", bound.Add(2*DefaultStartEvery))
	if st, _ := tr.Status(); st != slow {
		t.Fatalf("status %+v after a late LIVE answer, want %+v", st, slow)
	}
	clk.Advance(DefaultStartEvery)
	waitStatus(t, tr, live)
	wantChanges(t, tr, []Change{{Now: slow, At: bound}, {Now: live, At: bound.Add(2 * DefaultStartEvery)}})
}

// The extra readiness check of a ready proxy (pilot-agent's, under Istio)
// that runs out of time is no answer either, which the hold covers; one
// that answers not ready withdraws readiness at once.
func TestTrackerHoldsThroughASlowExtraCheck(t *testing.T) {
	var mu sync.Mutex
	extra := func(context.Context) string { return "" }
	cfg := TrackerConfig{ExtraReady: func(ctx context.Context) string {
		mu.Lock()
		f := extra
		mu.Unlock()
		return f(ctx)
	}}
	setExtra := func(f func(context.Context) string) {
		mu.Lock()
		defer mu.Unlock()
		extra = f
	}
	clk := clocktest.New()
	tr, _, t0 := readyAt(t, clk, cfg)
	setExtra(func(ctx context.Context) string { <-ctx.Done(); return "extra: " + ctx.Err().Error() })
	sent := t0.Add(time.Second)
	moveTo(t, clk, "the ready poll", sent)
	moveTo(t, clk, "the check's bound", sent.Add(900*time.Millisecond))
	// Held, and asked again at once.
	again := sent.Add(900*time.Millisecond + DefaultStartEvery)
	armed(t, clk, "the poll after the slow check", again)
	setExtra(func(context.Context) string { return "" })
	clk.Advance(again.Sub(clk.Now()))
	// Ready, so polled a second on.
	armed(t, clk, "the ready poll after a prompt check", again.Add(time.Second))
	wantChanges(t, tr, []Change{{Now: live, At: t0}})

	setExtra(func(context.Context) string { return "15020 answered 503" })
	clk.Advance(time.Second)
	not := Status{Reason: "15020 answered 503"}
	waitStatus(t, tr, not)
	wantChanges(t, tr, []Change{{Now: not, At: again.Add(time.Second)}})
}
