package peers

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParsePeers(t *testing.T) {
	tests := []struct {
		in    string
		count int
		names []string
		err   string // substring of the error; empty: success
	}{
		{in: "1", count: 1},
		{in: "3", count: 3},
		{in: " 2 ", count: 2},
		{in: "job", count: 1, names: []string{"job"}},
		{in: "job,uploader", count: 2, names: []string{"job", "uploader"}},
		{in: "job, uploader ", count: 2, names: []string{"job", "uploader"}},
		{in: "", err: "empty"},
		{in: "  ", err: "empty"},
		{in: "0", err: "at least 1"},
		{in: "-1", err: "at least 1"},
		{in: "99999999999999999999", err: "out of range"},
		{in: "job,", err: "empty name"},
		{in: ",job", err: "empty name"},
		{in: "job,,x", err: "empty name"},
		{in: "job,job", err: "listed twice"},
		{in: "Job", err: "lowercase"},
		{in: "job;x", err: "peer name"},
		{in: "-job", err: "start and end"},
	}
	for _, tt := range tests {
		count, names, err := ParsePeers(tt.in)
		if tt.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), "--peers: ") || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParsePeers(%q) = %v, want an error with %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || count != tt.count || !slices.Equal(names, tt.names) {
			t.Errorf("ParsePeers(%q) = %d, %q, %v; want %d, %q", tt.in, count, names, err, tt.count, tt.names)
		}
	}
}

// Why never calls a failed peer a success: under Always, where failures fix
// no code, the log said "every peer succeeded" after a peer exited 3.
func TestVerdictWhy(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1700000000+int64(s), 0) }
	always := Policy{Count: 2, Restart: Always}
	for _, tt := range []struct {
		p    Policy
		recs map[string]Record
		want string
	}{
		{always, map[string]Record{"a": {Time: at(1)}, "b": {ExitCode: 3, Reason: Exited, Time: at(2)}}, "every peer ended; failed: b"},
		{always, map[string]Record{"a": {Time: at(1)}, "b": {Time: at(2)}}, "every peer succeeded"},
		{Policy{Count: 2}, map[string]Record{"a": {Time: at(1)}, "b": {ExitCode: 3, Reason: Exited, Time: at(2)}}, "peer b failed with code 3"},
	} {
		if got := tt.p.Decide(tt.recs).Why(); got != tt.want {
			t.Errorf("%+v: Why() = %q, want %q", tt.recs, got, tt.want)
		}
	}
}

func TestAccepts(t *testing.T) {
	named := Policy{Count: 2, Names: []string{"job", "uploader"}}
	counted := Policy{Count: 2}
	tests := []struct {
		p    Policy
		name string
		ok   bool
	}{
		{named, "job", true},
		{named, "uploader", true},
		{named, "app", false},
		{named, "Job", false},
		{counted, "anything", true},
		{counted, "", false},
		{counted, "a/b", false},
	}
	for _, tt := range tests {
		if err := tt.p.Accepts(tt.name); (err == nil) != tt.ok {
			t.Errorf("%+v.Accepts(%q) = %v, want ok=%v", tt.p, tt.name, err, tt.ok)
		}
	}
}

func TestDecide(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1700000000+int64(s), 0) }
	ok := func(s int) Record { return Record{ExitCode: 0, Reason: Exited, Time: at(s)} }
	fail := func(code, s int) Record { return Record{ExitCode: code, Reason: Exited, Time: at(s)} }
	lost := func(s int) Record { return Record{ExitCode: LostCode, Reason: Lost, Time: at(s)} }
	notReady := func(s int) Record { return Record{ExitCode: NotReadyCode, Reason: NotReady, Time: at(s)} }
	signaled := func(s int) Record { return Record{ExitCode: 143, Reason: Signaled, Time: at(s)} }
	running := Record{Running: true, Time: at(0)}
	two := []string{"job", "uploader"}

	tests := []struct {
		name string
		p    Policy
		recs map[string]Record
		want Verdict
	}{
		{"count 1, nothing yet", Policy{Count: 1}, nil,
			Verdict{Awaiting: 1}},
		{"count 0 counts as 1", Policy{}, map[string]Record{"app": ok(1)},
			Verdict{Done: true, Settled: true}},
		{"count 1, running", Policy{Count: 1}, map[string]Record{"app": running},
			Verdict{Pending: []string{"app"}, Awaiting: 1}},
		{"count 1, success", Policy{Count: 1}, map[string]Record{"app": ok(1)},
			Verdict{Done: true, Settled: true}},
		{"count 1, failure", Policy{Count: 1}, map[string]Record{"app": fail(3, 1)},
			Verdict{Done: true, Settled: true, Code: 3, Failed: "app"}},
		{"count 1, lost", Policy{Count: 1}, map[string]Record{"app": lost(1)},
			Verdict{Done: true, Settled: true, Code: 137, Failed: "app"}},
		{"count 1, not ready", Policy{Count: 1}, map[string]Record{"app": notReady(1)},
			Verdict{Done: true, Settled: true, Code: 69, Failed: "app"}},
		{"count 1, app exits 69 by itself", Policy{Count: 1}, map[string]Record{"app": fail(69, 1)},
			Verdict{Done: true, Settled: true, Code: 69, Failed: "app"}},
		{"malformed failure with code 0 is not a success", Policy{Count: 1},
			map[string]Record{"app": {Reason: Lost, Time: at(1)}},
			Verdict{Done: true, Settled: true, Code: 1, Failed: "app"}},
		{"count 2, one success", Policy{Count: 2}, map[string]Record{"a": ok(1)},
			Verdict{Awaiting: 1}},
		{"count 2, one success one running", Policy{Count: 2}, map[string]Record{"a": ok(1), "b": running},
			Verdict{Pending: []string{"b"}, Awaiting: 1}},
		{"count 2, both succeed", Policy{Count: 2}, map[string]Record{"a": ok(1), "b": ok(2)},
			Verdict{Done: true, Settled: true}},
		{"count 2, a failure ends it", Policy{Count: 2}, map[string]Record{"a": ok(1), "b": fail(2, 2)},
			Verdict{Done: true, Settled: true, Code: 2, Failed: "b"}},
		{"count 2, a failure ends it while another runs", Policy{Count: 2}, map[string]Record{"a": running, "b": fail(2, 2)},
			Verdict{Done: true, Settled: true, Code: 2, Failed: "b"}},
		{"count 3, earliest failure wins", Policy{Count: 3},
			map[string]Record{"a": fail(5, 9), "b": lost(3), "c": fail(7, 4)},
			Verdict{Done: true, Settled: true, Code: 137, Failed: "b"}},
		{"equal times break ties by name", Policy{Count: 2},
			map[string]Record{"b": fail(5, 1), "a": fail(7, 1)},
			Verdict{Done: true, Settled: true, Code: 7, Failed: "a"}},
		{"count 1, success before a stray failure", Policy{Count: 1},
			map[string]Record{"a": ok(1), "b": fail(3, 2)},
			Verdict{Done: true, Settled: true}},
		{"count 1, stray failure before a success", Policy{Count: 1},
			map[string]Record{"a": ok(2), "b": fail(3, 1)},
			Verdict{Done: true, Settled: true, Code: 3, Failed: "b"}},
		{"count 2, the same name twice is one peer", Policy{Count: 2}, map[string]Record{"a": ok(2)},
			Verdict{Awaiting: 1}},

		{"OnFailure: a failure is not final", Policy{Count: 1, Restart: OnFailure}, map[string]Record{"app": fail(1, 1)},
			Verdict{Pending: []string{"app"}, Awaiting: 1}},
		{"OnFailure: lost is not final", Policy{Count: 1, Restart: OnFailure}, map[string]Record{"app": lost(1)},
			Verdict{Pending: []string{"app"}, Awaiting: 1}},
		{"OnFailure: the restarted app runs", Policy{Count: 1, Restart: OnFailure}, map[string]Record{"app": running},
			Verdict{Pending: []string{"app"}, Awaiting: 1}},
		{"OnFailure: success ends it", Policy{Count: 1, Restart: OnFailure}, map[string]Record{"app": ok(5)},
			Verdict{Done: true, Settled: true}},
		{"OnFailure: count 2, one failed one succeeded", Policy{Count: 2, Restart: OnFailure},
			map[string]Record{"a": fail(1, 1), "b": ok(2)},
			Verdict{Pending: []string{"a"}, Awaiting: 1}},

		{"Never is the default", Policy{Count: 1, Restart: Never}, map[string]Record{"app": fail(3, 1)},
			Verdict{Done: true, Settled: true, Code: 3, Failed: "app"}},
		{"Never: a SIGTERMed peer settles with 143", Policy{Count: 1}, map[string]Record{"app": signaled(1)},
			Verdict{Done: true, Settled: true, Code: 143, Failed: "app", Reason: Signaled}},

		{"Always: a failure settles for the drain but never stops", Policy{Count: 1, Restart: Always},
			map[string]Record{"app": fail(3, 1)},
			Verdict{Settled: true, Failures: []string{"app"}}},
		{"Always: a success settles for the drain but never stops", Policy{Count: 1, Restart: Always},
			map[string]Record{"app": ok(1)},
			Verdict{Settled: true}},
		{"Always: the restarted app runs", Policy{Count: 1, Restart: Always}, map[string]Record{"app": running},
			Verdict{Pending: []string{"app"}, Awaiting: 1}},
		{"Always: count 2, one ended", Policy{Count: 2, Restart: Always}, map[string]Record{"a": lost(1), "b": running},
			Verdict{Pending: []string{"b"}, Awaiting: 1}},
		{"Always: count 2, both ended", Policy{Count: 2, Restart: Always}, map[string]Record{"a": lost(1), "b": fail(1, 2)},
			Verdict{Settled: true, Failures: []string{"a", "b"}}},
		{"Always: count 2, one failed one succeeded", Policy{Count: 2, Restart: Always}, map[string]Record{"a": ok(1), "b": fail(3, 2)},
			Verdict{Settled: true, Failures: []string{"b"}}},

		{"names: all succeed", Policy{Count: 2, Names: two},
			map[string]Record{"job": ok(1), "uploader": ok(2)},
			Verdict{Done: true, Settled: true}},
		{"names: one missing", Policy{Count: 2, Names: two}, map[string]Record{"job": ok(1)},
			Verdict{Pending: []string{"uploader"}, Awaiting: 1}},
		{"names: nothing yet", Policy{Count: 2, Names: two}, nil,
			Verdict{Pending: []string{"job", "uploader"}, Awaiting: 2}},
		{"names: unknown names are ignored", Policy{Count: 2, Names: two},
			map[string]Record{"job": ok(1), "stray": ok(1), "other": fail(9, 0)},
			Verdict{Pending: []string{"uploader"}, Awaiting: 1}},
		{"names: a listed failure ends it", Policy{Count: 2, Names: two},
			map[string]Record{"job": running, "uploader": fail(4, 1)},
			Verdict{Done: true, Settled: true, Code: 4, Failed: "uploader"}},
		{"names: Count is ignored", Policy{Count: 1, Names: two}, map[string]Record{"job": ok(1)},
			Verdict{Pending: []string{"uploader"}, Awaiting: 1}},
		{"names + OnFailure: failure pending", Policy{Count: 2, Names: two, Restart: OnFailure},
			map[string]Record{"job": fail(1, 1), "uploader": ok(2)},
			Verdict{Pending: []string{"job"}, Awaiting: 1}},
		{"names + OnFailure: all succeed", Policy{Count: 2, Names: two, Restart: OnFailure},
			map[string]Record{"job": ok(3), "uploader": ok(2)},
			Verdict{Done: true, Settled: true}},

		{"native: success settles but does not stop", Policy{Count: 1, Native: true},
			map[string]Record{"app": ok(1)},
			Verdict{Settled: true}},
		{"native: failure settles with its code", Policy{Count: 1, Native: true},
			map[string]Record{"app": fail(3, 1)},
			Verdict{Settled: true, Code: 3, Failed: "app"}},
		{"native: running", Policy{Count: 1, Native: true}, map[string]Record{"app": running},
			Verdict{Pending: []string{"app"}, Awaiting: 1}},
		{"native + OnFailure: failure pending", Policy{Count: 1, Native: true, Restart: OnFailure},
			map[string]Record{"app": fail(3, 1)},
			Verdict{Pending: []string{"app"}, Awaiting: 1}},
		{"native + names: all succeed", Policy{Count: 2, Names: two, Native: true},
			map[string]Record{"job": ok(1), "uploader": ok(2)},
			Verdict{Settled: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.Decide(tt.recs)
			if got.Done != tt.want.Done || got.Settled != tt.want.Settled || got.Code != tt.want.Code ||
				got.Failed != tt.want.Failed || got.Awaiting != tt.want.Awaiting ||
				tt.want.Reason != "" && got.Reason != tt.want.Reason || !slices.Equal(got.Pending, tt.want.Pending) ||
				!slices.Equal(got.Failures, tt.want.Failures) {
				t.Errorf("Decide = %+v\n          want %+v", got, tt.want)
			}
		})
	}
}
