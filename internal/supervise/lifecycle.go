package supervise

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock"
	"github.com/proxy-supervisor/proxy-supervisor/internal/drain"
)

// Phase is where the supervisor is in the pod's lifecycle. Phases only move
// forward, along the moves listed in next.
type Phase int

const (
	// Starting: the proxy runs and has never been ready.
	Starting Phase = iota
	// Ready: the proxy has been ready. Whether it is ready right now is
	// the tracker's to say; a proxy that stops answering stays in this
	// phase and stops being ready.
	Ready
	// Draining: a preStop hook or SIGTERM started the termination's drain.
	Draining
	// Stopping: the proxy has been asked to stop.
	Stopping
	// Exited: the proxy has exited.
	Exited
)

var phaseNames = [...]string{"starting", "ready", "draining", "stopping", "exited"}

func (p Phase) String() string {
	if p < 0 || int(p) >= len(phaseNames) {
		return fmt.Sprintf("Phase(%d)", int(p))
	}
	return phaseNames[p]
}

// next lists the legal moves. A drain starts only once the proxy has been
// ready (the lifecycle says so under the lock that moves it to Ready), so
// never from Starting; the proxy can exit in any phase.
var next = map[Phase][]Phase{
	Starting: {Ready, Stopping, Exited},
	Ready:    {Draining, Stopping, Exited},
	Draining: {Stopping, Exited},
	Stopping: {Exited},
}

// drainRun is the termination's one drain: the preStop hook and SIGTERM,
// whichever comes first, start it, and both wait on the same end.
type drainRun struct {
	done    chan struct{}
	started time.Time    // on the supervisor's clock, written before the drain runs
	result  drain.Result // written before done is closed
	hinted  atomic.Bool  // the close hints have gone out (drain.Config.Hinted)
}

// lifecycle is the one owner of the supervisor's phase, of the exit code,
// of "the proxy has been ready" and of the termination's drain. move is the
// only writer of the phase; every reader (the status, the state gauge,
// /healthz/ready, the logs) goes through it. record is the only writer of
// the code, which it fixes once, when the first decisive event arrives: a
// read is a field, not a replay. becameReady is the only writer of the
// first readiness, which it refuses once a stop is decided; every reader of
// readiness (the ready mark, /v1/ready, /healthz/ready, the status, the
// termination message) follows it.
type lifecycle struct {
	log     *slog.Logger
	clk     clock.Clock // stamps the decision
	onPhase func(Phase) // told of every move once the lock is released (the state gauge)

	mu        sync.Mutex
	phase     Phase
	why       string    // what caused the last move
	drain     *drainRun // nil until the drain starts
	envoyDown time.Time // when a ready Envoy stopped answering, unasked
	readyAt   time.Time // when the proxy was first ready
	decision  decision  // the exit code, once an event has fixed it
	// earlyPreStop: a preStop came before the first readiness. The pod is
	// terminating (or the kubelet kills the container, whose SIGTERM then
	// follows), so a readiness that comes later is never reported to the
	// kubelet: the termination's drain starts with it (termination.preStop).
	earlyPreStop bool

	readied chan struct{} // closed once the first readiness is noted and announced
	moves   []phaseMove   // made under mu, told and logged once it is released
}

// phaseMove is one move, or one refused, told after the lock.
type phaseMove struct {
	from, to Phase
	why      string
	refused  bool
}

func newLifecycle(log *slog.Logger, clk clock.Clock, onPhase func(Phase)) *lifecycle {
	l := &lifecycle{log: log, clk: clk, onPhase: onPhase, why: "supervisor started", readied: make(chan struct{})}
	onPhase(Starting)
	return l
}

// move changes the phase to `to` if that is a legal move, and reports
// whether it did and from which phase. An illegal move is logged and not
// applied.
func (l *lifecycle) move(to Phase, why string) (from Phase, ok bool) {
	l.mu.Lock()
	defer l.unlock()
	return l.moveLocked(to, why)
}

func (l *lifecycle) moveLocked(to Phase, why string) (Phase, bool) {
	from := l.phase
	if !slices.Contains(next[from], to) {
		l.moves = append(l.moves, phaseMove{from, to, why, true})
		return from, false
	}
	l.phase, l.why = to, why
	l.moves = append(l.moves, phaseMove{from, to, why, false})
	return from, true
}

// unlock releases the lock, then tells the gauge and the log of the moves
// made under it: no callback, and no log line, runs under the lock. Two
// goroutines may tell theirs in either order; the gauge only moves
// forward, as the phase does.
func (l *lifecycle) unlock() {
	moves := l.moves
	l.moves = nil
	l.mu.Unlock()
	for _, m := range moves {
		if m.refused {
			l.log.Debug("phase change refused", "from", m.from.String(), "to", m.to.String(), "reason", m.why)
			continue
		}
		l.onPhase(m.to)
		l.log.Info("phase changed", "from", m.from.String(), "to", m.to.String(), "reason", m.why)
	}
}

// record takes an event. The first decisive one fixes the exit code; the
// rest change nothing and are dropped, so a signal storm costs no memory.
// The one exception, a proxy's own exit in the middle of the drain, is
// decision.take's. Whether the proxy has been ready, on which a signal's
// and a preStop's code depend, is the lifecycle's own, read under the lock
// that fixes the code: between a caller's read and its record the first
// readiness could otherwise be taken, and the app told so, while the code
// and the stop went the never-ready way. It returns that answer.
func (l *lifecycle) record(e Event) (everReady bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	everReady = !l.readyAt.IsZero()
	l.decision = l.decision.take(e, everReady, l.clk.Now())
	if e.Kind == PreStop && !everReady {
		l.earlyPreStop = true
	}
	return everReady
}

// preStopBeforeReady reports whether a preStop came before the first
// readiness.
func (l *lifecycle) preStopBeforeReady() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.earlyPreStop
}

// becameReady records the proxy's first readiness: when, and the move to
// Ready. It reports whether this was the first; only then does the caller
// announce it (announceReady), once it has told whoever must know before
// the app. A first readiness that comes once a stop is decided is refused
// for good: the proxy is on its way out, and whoever it told (a waiting
// exec, the ready mark, the termination message) would run against a
// proxy killed a moment later. Every decisive event before the first
// readiness stops the proxy (see decide), so a fixed code is such a stop
// too, even in the instant before the move to Stopping.
func (l *lifecycle) becameReady(at time.Time, why string) (first bool) {
	l.mu.Lock()
	defer l.unlock()
	if !l.readyAt.IsZero() || l.refusedLocked() {
		return false
	}
	l.readyAt = at
	l.moveLocked(Ready, why)
	return true
}

// refusedLocked reports whether a first readiness can no longer be taken:
// a stop was decided (or the proxy has exited) before it.
func (l *lifecycle) refusedLocked() bool {
	return l.readyAt.IsZero() && (l.decision.decided || l.phase >= Stopping)
}

// neverReady is why the proxy will never be ready in this supervisor's
// life, or "" while its first readiness may still come or has come.
func (l *lifecycle) neverReady() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.refusedLocked() {
		return ""
	}
	why := l.decision.why
	if why == "" {
		why = l.why
	}
	return "stopping before the proxy was ever ready (" + why + ")"
}

// announceReady wakes whoever waits for the first readiness (readiedCh).
// Call it once, after becameReady said first.
func (l *lifecycle) announceReady() { close(l.readied) }

// readiedCh is closed once the first readiness is noted and announced:
// from then on a SIGTERM or a preStop finds the proxy has been ready, and
// a status request finds the phase past Starting. It is never closed when
// a stop came first.
func (l *lifecycle) readiedCh() <-chan struct{} { return l.readied }

// everReady reports whether the proxy has been ready: the one answer to
// that, which the exit code of a SIGTERM or a preStop, and every reader of
// readiness (the socket's ready mark, /v1/ready, /healthz/ready, the
// status and the termination message) depend on.
func (l *lifecycle) everReady() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.readyAt.IsZero()
}

// exitCode is the code the events so far fix, and the event that fixed it.
func (l *lifecycle) exitCode() (code int, why string, fixed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.decision.code, l.decision.why, l.decision.decided
}

// current is the phase and what caused the move to it: all that most
// readers (every probe) want.
func (l *lifecycle) current() (Phase, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.phase, l.why
}

// draining reports whether the termination's drain has started; it stays
// true while stopping.
func (l *lifecycle) draining() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.drain != nil
}

// drainRunning is the termination's drain while the phase is Draining;
// nil otherwise (none, or the proxy is stopping).
func (l *lifecycle) drainRunning() *drainRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.phase != Draining {
		return nil
	}
	return l.drain
}

// beginDrain starts the termination's drain, moving to Draining, or joins
// the one under way. It returns nil when the proxy is already stopping or
// gone, since there is nothing left to drain. isNew tells the caller (the
// termination actor) to run the drain.
func (l *lifecycle) beginDrain(trigger string) (run *drainRun, isNew bool) {
	l.mu.Lock()
	defer l.unlock()
	if l.drain != nil {
		if l.phase != Draining {
			return nil, false
		}
		return l.drain, false
	}
	if _, ok := l.moveLocked(Draining, trigger); !ok {
		return nil, false
	}
	l.drain = &drainRun{done: make(chan struct{})}
	return l.drain, true
}

// noteEnvoyDown records when a ready Envoy stopped answering: only once the
// proxy has been ready (a port that refuses before that is a proxy still
// starting), not once it is being stopped (then that is expected), and only
// the first time.
func (l *lifecycle) noteEnvoyDown(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if (l.phase == Ready || l.phase == Draining) && l.envoyDown.IsZero() {
		l.envoyDown = at
	}
}

// snapshot is a consistent read of the lifecycle, for every reader that
// wants more than one of its fields (the status, the exit line, the summary).
type snapshot struct {
	phase     Phase
	why       string
	draining  bool // a drain has started (it stays true while stopping)
	code      int
	decidedBy string
	decided   bool
	envoyDown time.Time
	readyAt   time.Time
	decidedAt time.Time
}

func (l *lifecycle) snapshot() snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.decision
	return snapshot{
		phase: l.phase, why: l.why, draining: l.drain != nil,
		code: d.code, decidedBy: d.why, decided: d.decided,
		envoyDown: l.envoyDown, readyAt: l.readyAt, decidedAt: d.at,
	}
}

// DefaultDeletionWindow is how long a peer killed by a SIGTERM that exec
// did not forward (an app run without exec, or a report by POST alone)
// waits for the proxy's own preStop or SIGTERM before its code decides.
// Without exec's evidence the supervisor cannot tell a pod's deletion from
// a kill inside the pod, so this is a guess: it covers a quiet node's hook
// start (tens of milliseconds) with room, and delays a Job whose app was
// SIGTERMed for another reason by no more than 2 s. A busy kubelet can
// start the hook later (more than 2 s was measured with 16 pods on 2
// cores); exec's evidence does not depend on it (deletionWait).
const DefaultDeletionWindow = 2 * time.Second
