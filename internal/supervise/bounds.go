package supervise

import (
	"errors"
	"fmt"
	"time"
)

// The termination's bounds and the pod's grace period, in both its
// meanings: the ceiling the drain and the stop must fit (docs/design.md,
// "Bounds"), and the bound of a stopped peer's wait for the deletion.

// DefaultGracePeriod is Kubernetes' default terminationGracePeriodSeconds.
const DefaultGracePeriod = 30 * time.Second

// GraceMargin is what the pod's grace period must hold beyond the drain and
// the stop: time for the preStop hook to start, and the 2 s the kubelet may
// leave after a hook before SIGTERM.
const GraceMargin = 5 * time.Second

// minDrain is the shortest drain a grace period may leave: less would end
// every drain before Envoy's listeners have been asked to drain.
const minDrain = time.Second

// Bounds are the termination's bounds (--drain-min, --drain-timeout,
// --drain-delay, --stop-timeout, --quit-grace), the pod's grace period
// (--grace-period, 0 when not given) and liveness's (--hung-after), once
// NewBounds has derived what the flags left open.
type Bounds struct {
	DrainMin, DrainTimeout, DrainDelay time.Duration
	StopTimeout, QuitGrace             time.Duration
	GracePeriod                        time.Duration
	HungAfter                          time.Duration

	derived bool // DrainTimeout comes from GracePeriod
}

// Given says which bounds were set (by a flag or its variable) rather than
// left at their defaults: a given bound is never derived, lowered or
// raised.
type Given struct {
	DrainMin, DrainTimeout, DrainDelay bool
}

// NewBounds derives the bounds that b, as given, leaves open: the drain's
// bound from the grace period unless --drain-timeout is given, the floor
// from istioMin (Istio's mapped minimum, 0 for none) unless --drain-min is
// given, and --drain-delay's default inside the drain's bound; then it
// checks every bound. Its errors name the flag at fault.
func NewBounds(b Bounds, given Given, istioMin time.Duration) (Bounds, error) {
	if b.GracePeriod < 0 {
		return Bounds{}, errors.New("--grace-period: must not be negative")
	}
	// The grace period bounds the drain unless --drain-timeout is given
	// (docs/design.md, "Bounds").
	b.derived = b.GracePeriod > 0 && !given.DrainTimeout
	if b.derived {
		d, err := drainFromGrace(b.GracePeriod, b.StopTimeout)
		if err != nil {
			return Bounds{}, err
		}
		b.DrainTimeout = d
		if b.DrainMin > b.DrainTimeout && !given.DrainMin {
			b.DrainMin = b.DrainTimeout
		}
	}
	// Istio's knobs apply only where ours were not given: a flag or its
	// variable always wins (docs/reference.md, "Istio's knobs").
	if istioMin > 0 && !given.DrainMin {
		b.DrainMin = istioMin
		// A floor above the default ceiling would be cut short; Istio's
		// user asked for at least that long. A grace period is a ceiling
		// that the kubelet enforces, so it wins.
		if b.DrainMin > b.DrainTimeout && !given.DrainTimeout && !b.derived {
			b.DrainTimeout = b.DrainMin
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"drain-timeout", b.DrainTimeout}, {"stop-timeout", b.StopTimeout}, {"quit-grace", b.QuitGrace}} {
		if d.v <= 0 {
			return Bounds{}, fmt.Errorf("--%s: must be above zero, got %v", d.name, d.v)
		}
	}
	if b.DrainMin < 0 {
		return Bounds{}, errors.New("--drain-min: must not be negative")
	}
	if b.HungAfter < 0 {
		return Bounds{}, errors.New("--hung-after: must not be negative")
	}
	if err := b.fitDelay(given.DrainDelay); err != nil {
		return Bounds{}, err
	}
	return b, nil
}

// drainFromGrace is the drain's bound that the pod's grace period leaves
// after the stop and the margin. A grace period that leaves less than
// minDrain is refused: the kubelet would SIGKILL a proxy that drained at
// all, and a silent clamp would hide that.
func drainFromGrace(grace, stop time.Duration) (time.Duration, error) {
	d := grace - stop - GraceMargin
	if d < minDrain {
		return 0, fmt.Errorf("--grace-period: %v leaves %v to drain after --stop-timeout %v and the %v margin, less than %v; "+
			"give a longer grace period, a shorter --stop-timeout, or --drain-timeout explicitly", grace, max(d, 0), stop, GraceMargin, minDrain)
	}
	return d, nil
}

// fitDelay fits --drain-delay inside the drain's bound: a delay that
// reaches it would end every drain before a single close hint. One given
// so is refused; the default is lowered to half of a short bound.
func (b *Bounds) fitDelay(given bool) error {
	switch {
	case b.DrainDelay < 0:
		return errors.New("--drain-delay: must not be negative")
	case b.DrainDelay < b.DrainTimeout:
	case given:
		return fmt.Errorf("--drain-delay: %v is not shorter than the drain's bound %v (--drain-timeout, or what --grace-period leaves): no close hint would ever go", b.DrainDelay, b.DrainTimeout)
	default:
		b.DrainDelay = b.DrainTimeout / 2
	}
	return nil
}

// Derived reports whether the drain's bound comes from the grace period.
func (b Bounds) Derived() bool { return b.derived }

// MinCutShort reports whether the drain's floor is above its bound, which
// then ends the drain first.
func (b Bounds) MinCutShort() bool { return b.DrainMin > b.DrainTimeout }

// Need is the grace period that the drain and the stop need, with the
// margin.
func (b Bounds) Need() time.Duration { return b.DrainTimeout + b.StopTimeout + GraceMargin }

// FitsGrace reports whether the drain and the stop fit the pod's grace
// period, when one is given: otherwise the kubelet's SIGKILL comes first.
func (b Bounds) FitsGrace() bool { return b.GracePeriod == 0 || b.Need() <= b.GracePeriod }

// DeletionGrace bounds the wait of a peer that the kubelet stopped for the
// pod's termination to reach the proxy (deletionWait): the pod's grace
// period, or Kubernetes' default when none is given.
func (b Bounds) DeletionGrace() time.Duration {
	if b.GracePeriod <= 0 {
		return DefaultGracePeriod
	}
	return b.GracePeriod
}
