package main

import (
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

func TestRestartPolicy(t *testing.T) {
	tests := []struct {
		name      string
		restart   string
		given     bool
		onFailure string
		want      peers.Restart
		err       bool
	}{
		{"default", "Never", false, "", peers.Never, false},
		{"given", "Always", true, "", peers.Always, false},
		{"alias exit", "Never", false, "exit", peers.Never, false},
		{"alias wait", "Never", false, "wait", peers.OnFailure, false},
		{"both agree", "OnFailure", true, "wait", peers.OnFailure, false},
		{"both agree on Never", "Never", true, "exit", peers.Never, false},
		{"both disagree", "Never", true, "wait", "", true},
		{"Always has no alias", "Always", true, "exit", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := restartPolicy(tt.restart, tt.given, tt.onFailure)
			if (err != nil) != tt.err || got != tt.want {
				t.Fatalf("restartPolicy = %q, %v; want %q, error %v", got, err, tt.want, tt.err)
			}
		})
	}
}

// The default --drain-delay is lowered to half of a drain's bound that it
// does not fit (a short grace period's), as --drain-min is lowered to it;
// a given one that does not fit is refused (TestBadFlagValuesExit2).
func TestDrainDelayDefaultFitsTheBound(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"--grace-period", "11s"}, min(defaultDrainDelay, 500*time.Millisecond)},
		{[]string{"--grace-period", "30s"}, defaultDrainDelay},
		{[]string{"--grace-period", "11s", "--drain-delay", "900ms"}, 900 * time.Millisecond},
	} {
		f, o := superviseFlags()
		cmdline, err := f.parse(append(tt.args, "--", "envoy"), envOf(nil))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := o.config(f, cmdline, envOf(nil))
		if err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		if cfg.DrainDelay != tt.want {
			t.Errorf("%q: drain delay %v, want %v", tt.args, cfg.DrainDelay, tt.want)
		}
	}
}

// Istio's knobs map onto --drain-min only where neither the flag nor its
// variable is given: ours always win (docs/reference.md, "Istio's knobs"),
// and a minimum they do not map does not raise the drain's bound either.
func TestAnExplicitDrainMinBeatsIstiosKnobs(t *testing.T) {
	istio := map[string]string{"EXIT_ON_ZERO_ACTIVE_CONNECTIONS": "true", "MINIMUM_DRAIN_DURATION": "30s"}
	withVar := map[string]string{"PROXY_SUPERVISOR_DRAIN_MIN": "3s"}
	for k, v := range istio {
		withVar[k] = v
	}
	for _, tt := range []struct {
		name          string
		args          []string
		env           map[string]string
		min, drainMax time.Duration
	}{
		{"Istio's alone", nil, istio, 30 * time.Second, 30 * time.Second}, // the bound raised to the minimum
		{"the flag", []string{"--drain-min", "2s"}, istio, 2 * time.Second, 20 * time.Second},
		{"the variable", nil, withVar, 3 * time.Second, 20 * time.Second},
		{"the flag of zero", []string{"--drain-min", "0s"}, istio, 0, 20 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, o := superviseFlags()
			env := envOf(tt.env)
			cmdline, err := f.parse(append(tt.args, "--", "envoy"), env)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := o.config(f, cmdline, env)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.DrainMin != tt.min || cfg.DrainTimeout != tt.drainMax {
				t.Errorf("drain min %v, timeout %v; want %v, %v", cfg.DrainMin, cfg.DrainTimeout, tt.min, tt.drainMax)
			}
		})
	}
}
