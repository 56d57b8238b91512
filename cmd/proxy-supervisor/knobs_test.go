package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A misspelt command or flag gets the nearest real one, when one is near
// and no other is as near; a word far from all gets none.
func TestMisspellingsGetASuggestion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the one line on stderr; "" for no suggestion
	}{
		{[]string{"supervize"}, "did you mean supervise?"},
		{[]string{"prestp"}, "did you mean prestop?"},
		{[]string{"frobnicate"}, ""},
		{[]string{"supervise", "--drain-mn", "1s"}, "did you mean --drain-min?"},
		{[]string{"wait", "--timout", "1s"}, "did you mean --timeout?"},
		{[]string{"supervise", "--xyzzy"}, ""},
	} {
		var out bytes.Buffer
		code := run(tc.args, func(string) string { return "" }, &out, &out)
		line := strings.TrimSpace(out.String())
		if code != 2 || strings.Contains(line, "\n") {
			t.Errorf("%q: exit %d, %q; want 2 and one line", tc.args, code, line)
			continue
		}
		if got := strings.Contains(line, "did you mean"); got != (tc.want != "") || tc.want != "" && !strings.Contains(line, tc.want) {
			t.Errorf("%q: %q, want the suggestion %q", tc.args, line, tc.want)
		}
	}
}

// --log-level drops the lines below it; JSON gives a duration with its unit.
func TestLogLevelAndJSONDurations(t *testing.T) {
	for _, tc := range []struct {
		format, level string
		want, not     []string
	}{
		{"json", "info", []string{`"after":"413ms"`, `"msg":"i"`}, []string{`"msg":"d"`, "413000000"}},
		{"json", "debug", []string{`"msg":"d"`}, nil},
		{"text", "warn", []string{"msg=w", "after=413ms"}, []string{"msg=i"}},
		{"text", "error", []string{"msg=e"}, []string{"msg=w"}},
	} {
		var out bytes.Buffer
		log := newLogger(&out, tc.format, tc.level)
		log.Debug("d")
		log.Info("i", "after", 413*time.Millisecond)
		log.Warn("w", "after", 413*time.Millisecond)
		log.Error("e")
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s at %s: no %q in\n%s", tc.format, tc.level, w, out.String())
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out.String(), n) {
				t.Errorf("%s at %s: %q in\n%s", tc.format, tc.level, n, out.String())
			}
		}
	}
	var out bytes.Buffer
	if code := run([]string{"supervise", "--check", "--log-level", "loud", "--", "envoy"}, func(string) string { return "" }, &out, &out); code != 2 {
		t.Errorf("--log-level loud: exit %d, %q; want 2", code, out.String())
	}
}
