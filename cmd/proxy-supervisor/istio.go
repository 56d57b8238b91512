package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// istioSettings is what Istio's own drain knobs say, for users who set them
// on the istio-proxy container and expect them to keep meaning the same.
type istioSettings struct {
	min    time.Duration // the floor of the drain, or 0 when no knob is set
	source string
}

// istioDrain maps Istio's knobs onto --drain-min:
//
//   - EXIT_ON_ZERO_ACTIVE_CONNECTIONS=true: pilot-agent sleeps
//     MINIMUM_DRAIN_DURATION, then waits for zero connections. That sleep is
//     our --drain-min; we then wait for the app's ports and Envoy's
//     connections, as it does, but with --drain-timeout as the bound it lacks.
//   - otherwise: pilot-agent waits terminationDrainDuration (PROXY_CONFIG)
//     and kills Envoy. That wait becomes the floor too: the proxy stays at
//     least as long as users asked, and longer only while the app still
//     listens or holds connections.
//
// A knob that is not set maps nothing. PROXY_SUPERVISOR_DRAIN_MIN and
// --drain-min win over both.
func istioDrain(env func(string) string) (istioSettings, error) {
	if exitOnZero, _ := strconv.ParseBool(env("EXIT_ON_ZERO_ACTIVE_CONNECTIONS")); exitOnZero {
		raw := env("MINIMUM_DRAIN_DURATION")
		if raw == "" {
			return istioSettings{}, nil
		}
		d, err := time.ParseDuration(raw)
		if err != nil || d < 0 {
			return istioSettings{}, usagef("MINIMUM_DRAIN_DURATION=%q: want a duration such as 5s", raw)
		}
		return istioSettings{d, "MINIMUM_DRAIN_DURATION"}, nil
	}
	raw := env("PROXY_CONFIG")
	if raw == "" {
		return istioSettings{}, nil
	}
	v, ok := terminationDrainDuration(raw)
	if !ok {
		return istioSettings{}, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return istioSettings{}, usagef("PROXY_CONFIG: terminationDrainDuration %q: want a duration such as 5s", v)
	}
	return istioSettings{d, "PROXY_CONFIG terminationDrainDuration"}, nil
}

func terminationDrainDuration(cfg string) (string, bool) {
	var doc struct {
		TerminationDrainDuration *string `json:"terminationDrainDuration"`
	}
	if json.Unmarshal([]byte(cfg), &doc) == nil {
		if doc.TerminationDrainDuration == nil {
			return "", false
		}
		return *doc.TerminationDrainDuration, true
	}
	return yamlValue(cfg, "terminationDrainDuration")
}

// yamlValue finds a top-level scalar in the YAML form of PROXY_CONFIG (the
// proxy.istio.io/config annotation's): a line `key: value`, either of them
// optionally quoted. A YAML parser, or even the regexp package, would cost
// more binary and more resident memory than this one value is worth.
func yamlValue(doc, key string) (string, bool) {
	for line := range strings.Lines(doc) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || unquote(strings.TrimSpace(k)) != key {
			continue
		}
		v = unquote(strings.TrimSpace(v))
		if v == "" || strings.ContainsAny(v, " \t\"'") {
			return "", false
		}
		return v, true
	}
	return "", false
}

// unquote strips one pair of matching single or double quotes.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}
