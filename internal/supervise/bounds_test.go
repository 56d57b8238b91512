package supervise

import (
	"strings"
	"testing"
	"time"
)

func TestDrainFromGrace(t *testing.T) {
	s := time.Second
	tests := []struct {
		grace, stop, want time.Duration
		err               bool
	}{
		{30 * s, 5 * s, 20 * s, false}, // the defaults, as before
		{120 * s, 5 * s, 110 * s, false},
		{12 * s, 5 * s, 2 * s, false},
		{11 * s, 5 * s, 1 * s, false},
		{10 * s, 3 * s, 2 * s, false}, // a short grace period fits a shorter stop
		{10 * s, 5 * s, 0, true},
		{5 * s, 5 * s, 0, true},
	}
	for _, tt := range tests {
		got, err := drainFromGrace(tt.grace, tt.stop)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("drainFromGrace(%v, %v) = %v, %v; want %v, error %v", tt.grace, tt.stop, got, err, tt.want, tt.err)
		}
	}
}

// defaults are supervise's flags' defaults, as the command passes them.
var defaults = Bounds{
	DrainMin:     5 * time.Second,
	DrainTimeout: 20 * time.Second,
	DrainDelay:   3 * time.Second,
	StopTimeout:  5 * time.Second,
	QuitGrace:    time.Second,
}

// with is defaults changed by set.
func with(set func(*Bounds)) Bounds {
	b := defaults
	set(&b)
	return b
}

func TestNewBounds(t *testing.T) {
	s := time.Second
	grace := func(g time.Duration) func(*Bounds) { return func(b *Bounds) { b.GracePeriod = g } }
	tests := []struct {
		name     string
		in       Bounds
		given    Given
		istioMin time.Duration
		// want: the min, timeout and delay derived, and whether the
		// timeout came from the grace period.
		min, timeout, delay time.Duration
		derived             bool
	}{
		{"the defaults", defaults, Given{}, 0, 5 * s, 20 * s, 3 * s, false},
		{"from the grace period", with(grace(120 * s)), Given{}, 0, 5 * s, 110 * s, 3 * s, true},
		{"the floor lowered to a short derived bound", with(grace(12 * s)), Given{}, 0, 2 * s, 2 * s, 1 * s, true},
		{"a given floor kept above it", with(func(b *Bounds) { b.GracePeriod, b.DrainMin = 12*s, 4*s }), Given{DrainMin: true}, 0, 4 * s, 2 * s, 1 * s, true},
		{"the default delay halved", with(grace(11 * s)), Given{}, 0, 1 * s, 1 * s, 500 * time.Millisecond, true},
		{"a given delay that fits", with(func(b *Bounds) { b.GracePeriod, b.DrainDelay = 11*s, 900*time.Millisecond }), Given{DrainDelay: true}, 0, 1 * s, 1 * s, 900 * time.Millisecond, true},
		{"a given timeout wins over the grace period", with(func(b *Bounds) { b.GracePeriod, b.DrainTimeout = 12*s, 30*s }), Given{DrainTimeout: true}, 0, 5 * s, 30 * s, 3 * s, false},
		{"Istio's floor raises the default bound", defaults, Given{}, 30 * s, 30 * s, 30 * s, 3 * s, false},
		{"Istio's floor below the bound", defaults, Given{}, 8 * s, 8 * s, 20 * s, 3 * s, false},
		{"Istio's floor never raises a derived bound", with(grace(30 * s)), Given{}, 40 * s, 40 * s, 20 * s, 3 * s, true},
		{"Istio's floor never raises a given bound", defaults, Given{DrainTimeout: true}, 30 * s, 30 * s, 20 * s, 3 * s, false},
		{"a given floor beats Istio's", with(func(b *Bounds) { b.DrainMin = 2 * s }), Given{DrainMin: true}, 30 * s, 2 * s, 20 * s, 3 * s, false},
		{"a given floor of zero beats Istio's", with(func(b *Bounds) { b.DrainMin = 0 }), Given{DrainMin: true}, 30 * s, 0, 20 * s, 3 * s, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBounds(tt.in, tt.given, tt.istioMin)
			if err != nil {
				t.Fatal(err)
			}
			if b.DrainMin != tt.min || b.DrainTimeout != tt.timeout || b.DrainDelay != tt.delay || b.Derived() != tt.derived {
				t.Errorf("min %v, timeout %v, delay %v, derived %v; want %v, %v, %v, %v",
					b.DrainMin, b.DrainTimeout, b.DrainDelay, b.Derived(), tt.min, tt.timeout, tt.delay, tt.derived)
			}
			if b.StopTimeout != tt.in.StopTimeout || b.QuitGrace != tt.in.QuitGrace || b.GracePeriod != tt.in.GracePeriod {
				t.Errorf("%+v changed a bound that nothing derives, from %+v", b, tt.in)
			}
		})
	}
}

// Every bad bound is refused with an error that names its flag, the one
// the command line must fix.
func TestNewBoundsRefuses(t *testing.T) {
	s := time.Second
	tests := []struct {
		name  string
		in    Bounds
		given Given
		want  string
	}{
		{"grace period negative", with(func(b *Bounds) { b.GracePeriod = -s }), Given{}, "--grace-period: must not be negative"},
		{"grace period leaves no drain", with(func(b *Bounds) { b.GracePeriod = 10 * s }), Given{}, "--grace-period: 10s leaves 0s to drain after --stop-timeout 5s and the 5s margin, less than 1s"},
		{"drain timeout zero", with(func(b *Bounds) { b.DrainTimeout = 0 }), Given{DrainTimeout: true}, "--drain-timeout: must be above zero, got 0s"},
		{"stop timeout zero", with(func(b *Bounds) { b.StopTimeout = 0 }), Given{}, "--stop-timeout: must be above zero, got 0s"},
		{"quit grace negative", with(func(b *Bounds) { b.QuitGrace = -s }), Given{}, "--quit-grace: must be above zero, got -1s"},
		{"drain min negative", with(func(b *Bounds) { b.DrainMin = -s }), Given{DrainMin: true}, "--drain-min: must not be negative"},
		{"hung after negative", with(func(b *Bounds) { b.HungAfter = -s }), Given{}, "--hung-after: must not be negative"},
		// Checked in the flags' order: --hung-after before --drain-delay.
		{"hung after before drain delay", with(func(b *Bounds) { b.HungAfter, b.DrainDelay = -s, -s }), Given{DrainDelay: true}, "--hung-after: must not be negative"},
		{"drain delay negative", with(func(b *Bounds) { b.DrainDelay = -s }), Given{DrainDelay: true}, "--drain-delay: must not be negative"},
		{"drain delay reaches the bound", with(func(b *Bounds) { b.DrainDelay = 20 * s }), Given{DrainDelay: true}, "--drain-delay: 20s is not shorter than the drain's bound 20s"},
		{"drain delay past a derived bound", with(func(b *Bounds) { b.GracePeriod, b.DrainDelay = 20*s, 10*s }), Given{DrainDelay: true}, "--drain-delay: 10s is not shorter than the drain's bound 10s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBounds(tt.in, tt.given, 0)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("NewBounds = %+v, %v; want the error %q", b, err, tt.want)
			}
		})
	}
}

// What the start's log says of the bounds: whether the floor is cut short,
// and whether the drain and the stop fit the grace period.
func TestBoundsFit(t *testing.T) {
	s := time.Second
	for _, tt := range []struct {
		name      string
		b         Bounds
		need      time.Duration
		cut, fits bool
	}{
		{"no grace period given", with(func(b *Bounds) {}), 30 * s, false, true},
		{"the default grace period, exactly", with(func(b *Bounds) { b.GracePeriod = 30 * s }), 30 * s, false, true},
		{"a grace period too short", with(func(b *Bounds) { b.GracePeriod = 20 * s }), 30 * s, false, false},
		{"a floor above the bound", with(func(b *Bounds) { b.DrainMin = 25 * s }), 30 * s, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.Need(); got != tt.need {
				t.Errorf("Need = %v, want %v", got, tt.need)
			}
			if got := tt.b.MinCutShort(); got != tt.cut {
				t.Errorf("MinCutShort = %v, want %v", got, tt.cut)
			}
			if got := tt.b.FitsGrace(); got != tt.fits {
				t.Errorf("FitsGrace = %v, want %v", got, tt.fits)
			}
		})
	}
}

// The deletion wait is bounded by the pod's grace period, or by
// Kubernetes' default when none is given.
func TestDeletionGrace(t *testing.T) {
	if got := (Bounds{}).DeletionGrace(); got != DefaultGracePeriod {
		t.Errorf("no grace period: %v, want %v", got, DefaultGracePeriod)
	}
	if got := (Bounds{GracePeriod: 90 * time.Second}).DeletionGrace(); got != 90*time.Second {
		t.Errorf("90s: %v", got)
	}
}
