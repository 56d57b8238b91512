package peers

import (
	"strings"
	"testing"
	"time"
)

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"app", true},
		{"a", true},
		{"0", true},
		{"job-1", true},
		{"job.uploader", true},
		{strings.Repeat("a", 63), true},
		{"", false},
		{strings.Repeat("a", 64), false},
		{"-job", false},
		{"job-", false},
		{".job", false},
		{"job.", false},
		{"Job", false},
		{"job_1", false},
		{"a/b", false},
		{"..", false},
		{"a b", false},
		{"a\nb", false},
		{"é", false},
	}
	for _, tt := range tests {
		err := ValidName(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("ValidName(%q): error spans lines: %q", tt.name, err)
		}
	}
}

func TestValidCode(t *testing.T) {
	for code, ok := range map[int]bool{-1: false, 0: true, 1: true, 69: true, 255: true, 256: false} {
		if err := ValidCode(code); (err == nil) != ok {
			t.Errorf("ValidCode(%d) = %v, want ok=%v", code, err, ok)
		}
	}
}

func TestRecordOutcome(t *testing.T) {
	tests := []struct {
		r                 Record
		final, ok, failed bool
	}{
		{Record{Running: true}, false, false, false},
		{Record{ExitCode: 0, Reason: Exited}, true, true, false},
		{Record{ExitCode: 0}, true, true, false},
		{Record{ExitCode: 1, Reason: Exited}, true, false, true},
		{Record{ExitCode: 143, Reason: Signaled}, true, false, true},
		{Record{ExitCode: 69, Reason: NotReady}, true, false, true},
		{Record{ExitCode: 137, Reason: Lost}, true, false, true},
		// Malformed, but must still never read as a success.
		{Record{ExitCode: 0, Reason: Lost}, true, false, true},
	}
	for _, tt := range tests {
		if got := tt.r.Final(); got != tt.final {
			t.Errorf("%+v: Final() = %v", tt.r, got)
		}
		if got := tt.r.Succeeded(); got != tt.ok {
			t.Errorf("%+v: Succeeded() = %v", tt.r, got)
		}
		if got := tt.r.Failed(); got != tt.failed {
			t.Errorf("%+v: Failed() = %v", tt.r, got)
		}
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		in   string
		want Record // zero: an error is expected
	}{
		{`{"name":"app","exit_code":0,"reason":"exited","time":"2025-01-02T03:04:05Z"}`,
			Record{Name: "app", Reason: Exited, Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}},
		{`{"name":"app","exit_code":3}`, Record{Name: "app", ExitCode: 3, Reason: Exited}},
		{`{"name":"app","running":true,"exit_code":0}`, Record{Name: "app", Running: true}},
		{`{"name":"app","running":true}`, Record{Name: "app", Running: true}},
		{`{"name":"app","exit_code":143,"reason":"signaled","extra":[1,2]}`, Record{Name: "app", ExitCode: 143, Reason: Signaled}},
		{`{"name":"app","exit_code":69,"reason":"not-ready"}`, Record{Name: "app", ExitCode: 69, Reason: NotReady}},
		{`{"name":"app","exit_code":1,"stop":{"signal":"SIGTERM","at":"2025-01-02T03:04:05Z"}}`,
			Record{Name: "app", ExitCode: 1, Reason: Exited, Stop: Stop{"SIGTERM", time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}}},
		{``, Record{}},
		{`null`, Record{}},
		{`[]`, Record{}},
		{`{}`, Record{}},
		{`{"name":"app"}`, Record{}},                                    // final without a code
		{`{"name":null,"exit_code":0}`, Record{}},                       // no name
		{`{"name":"App","exit_code":0}`, Record{}},                      // invalid name
		{`{"name":"app","exit_code":256}`, Record{}},                    // code out of range
		{`{"name":"app","exit_code":-1}`, Record{}},                     // code out of range
		{`{"name":"app","exit_code":1.5}`, Record{}},                    // not an integer
		{`{"name":"app","exit_code":0,"reason":"oom"}`, Record{}},       // unknown reason
		{`{"name":"app","exit_code":9,"reason":"signaled"}`, Record{}},  // not 128+N
		{`{"name":"app","exit_code":0,"reason":"lost"}`, Record{}},      // failure with 0
		{`{"name":"app","exit_code":0,"reason":"not-ready"}`, Record{}}, // failure with 0
		{`{"name":"app","running":true,"exit_code":1}`, Record{}},       // running with a code
		{`{"name":"app","running":true,"reason":"exited"}`, Record{}},   // running with a reason
		{`{"name":"app","exit_code":0,"time":"yesterday"}`, Record{}},
		{`{"name":"app","exit_code":0} {}`, Record{}}, // trailing data
		{`{"name":"app","exit_code":143,"stop":{"signal":"SIGNOPE","at":"2025-01-02T03:04:05Z"}}`, Record{}}, // not a signal
		{`{"name":"app","exit_code":143,"stop":{"signal":"SIGTERM"}}`, Record{}},                             // no time
		{`{"name":"app","exit_code":143,"stop":{"at":"2025-01-02T03:04:05Z"}}`, Record{}},                    // a time without a signal
		{`{"name":"app","running":true,"stop":{"signal":"SIGTERM","at":"2025-01-02T03:04:05Z"}}`, Record{}},  // running with a stop
	}
	for _, tt := range tests {
		got, err := decode([]byte(tt.in))
		if tt.want.Name == "" {
			if err == nil {
				t.Errorf("decode(%s) = %+v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || !got.Time.Equal(tt.want.Time) {
			t.Errorf("decode(%s) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		got.Time, tt.want.Time = time.Time{}, time.Time{}
		if !got.Stop.Equal(tt.want.Stop) {
			t.Errorf("decode(%s) = %+v, want %+v", tt.in, got, tt.want)
		}
		got.Stop, tt.want.Stop = Stop{}, Stop{}
		if got != tt.want {
			t.Errorf("decode(%s) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	for _, r := range []Record{
		{Name: "app", Running: true},
		{Name: "app", ExitCode: 0, Reason: Exited},
		{Name: "job.x", ExitCode: 137, Reason: Signaled},
		{Name: "up-1", ExitCode: 69, Reason: NotReady},
		{Name: "app", ExitCode: 143, Reason: Signaled, Stop: Stop{"SIGTERM", time.Date(2025, 6, 7, 8, 9, 9, 0, time.UTC)}},
		{Name: "app", Running: true, Started: time.Date(2025, 6, 7, 8, 9, 1, 0, time.UTC)},
		{Name: "app", ExitCode: 0, Reason: Exited, Started: time.Date(2025, 6, 7, 8, 9, 1, 0, time.UTC)},
	} {
		r.Time = time.Date(2025, 6, 7, 8, 9, 10, 11, time.UTC)
		b, err := encode(r)
		if err != nil {
			t.Fatal(err)
		}
		if r.Stop.IsZero() && strings.Contains(string(b), "stop") {
			t.Errorf("%+v encodes an empty stop: %s", r, b)
		}
		if r.Started.IsZero() && strings.Contains(string(b), "started") {
			t.Errorf("%+v encodes an empty start: %s", r, b)
		}
		got, err := decode(b)
		if err != nil || got != r {
			t.Errorf("round trip of %+v: %+v, %v (%s)", r, got, err, b)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"name":"app","exit_code":0,"reason":"exited","time":"2025-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"name":"app","running":true,"exit_code":0}`))
	f.Add([]byte(`{"name":"a","exit_code":137,"reason":"lost"}`))
	f.Add([]byte(`{"name":"a","exit_code":1e3}`))
	f.Add([]byte(`{"name":"` + strings.Repeat("a", 100) + `","exit_code":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decode(b)
		if err != nil {
			return
		}
		// Whatever decodes must be a consistent record that survives a
		// round trip.
		if err := r.Validate(); err != nil {
			t.Fatalf("decode(%q) = %+v, which does not validate: %v", b, r, err)
		}
		if r.Final() && r.Reason == "" {
			t.Fatalf("decode(%q) left a final record without a reason", b)
		}
		out, err := encode(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decode(out)
		if err != nil || !again.Time.Equal(r.Time) {
			t.Fatalf("round trip of %+v: %+v, %v", r, again, err)
		}
	})
}
