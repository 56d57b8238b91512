package peers

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Reason says how a peer ended. It tells exec's own codes apart from an app
// that happens to exit with the same number.
type Reason string

const (
	// Exited: COMMAND exited by itself, and the code is its own.
	Exited Reason = "exited"
	// Signaled: signal N killed COMMAND, and the code is 128+N.
	Signaled Reason = "signaled"
	// NotReady: the proxy was not ready in time, so exec ran nothing and
	// reports NotReadyCode.
	NotReady Reason = "not-ready"
	// Lost: exec died without a final record, reported as LostCode.
	Lost Reason = "lost"
)

const (
	// NotReadyCode is what exec exits with when the proxy never became
	// ready (EX_UNAVAILABLE).
	NotReadyCode = 69
	// LostCode is 128+SIGKILL, what the kubelet reports for a container it
	// killed: the likely end of an exec that died without reporting.
	LostCode = 137
)

// maxRecordSize bounds what Load reads. A record is about a hundred bytes;
// anything near this size is not one.
const maxRecordSize = 64 << 10

// Record is the content of <control-dir>/peers/<name>.
type Record struct {
	Name     string    `json:"name"`
	Running  bool      `json:"running,omitempty"` // exec started COMMAND; not final
	ExitCode int       `json:"exit_code"`
	Reason   Reason    `json:"reason,omitempty"`
	Time     time.Time `json:"time"`
	// Stop is set by exec when the run ended after a stop signal that
	// came to exec from outside (the kubelet stopping the app container),
	// which exec forwarded to COMMAND. A final record only.
	Stop Stop `json:"stop,omitzero"`
	// Started is when the container of the client that wrote the record
	// started (ContainerStarted), zero when it could not tell: what tells
	// a pod's next run after a RestartAllContainers from the run before
	// (EarlierRun). A supervisor's own copies keep the writer's.
	Started time.Time `json:"started,omitzero"`
	UID     uint32    `json:"-"` // owner of the file, filled in by Load
}

// Stop is the evidence that a peer was asked to stop from outside: the
// stop signal exec received and forwarded (the first one), and when. The
// kubelet stops an app container so on a pod's deletion, and kills it so
// alone only on a failed probe; a signal sent to the app's process by
// anything else in the pod never reaches exec, and leaves Stop empty.
type Stop struct {
	Signal string    `json:"signal"` // its name: SIGTERM
	At     time.Time `json:"at"`
}

// IsZero reports whether no stop signal came.
func (s Stop) IsZero() bool { return s.Signal == "" }

// Code is 128+N for the signal, the code of a process it killed.
func (s Stop) Code() int { return 128 + int(unix.SignalNum(s.Signal)) }

// Equal reports whether s and o say the same, whatever their times'
// locations.
func (s Stop) Equal(o Stop) bool { return s.Signal == o.Signal && s.At.Equal(o.At) }

// StopOf is the evidence of sig, received at.
func StopOf(sig unix.Signal, at time.Time) Stop {
	return Stop{Signal: unix.SignalName(sig), At: at}
}

func (s Stop) validate() error {
	switch {
	case s.IsZero() && !s.At.IsZero():
		return errors.New("a stop's time without its signal")
	case s.IsZero():
		return nil
	case unix.SignalNum(s.Signal) == 0:
		return fmt.Errorf("stop signal %s is not a signal's name", quote(s.Signal))
	case s.At.IsZero():
		return fmt.Errorf("stop signal %s has no time", s.Signal)
	}
	return nil
}

// Final reports whether the record is an outcome rather than a run in
// progress.
func (r Record) Final() bool { return !r.Running }

// Succeeded reports whether the record is final with exit code 0. A failure
// reason with code 0 is not a success, whatever the code says.
func (r Record) Succeeded() bool {
	return r.Final() && r.ExitCode == 0 && (r.Reason == "" || r.Reason == Exited)
}

// Failed reports whether the record is final and not a success.
func (r Record) Failed() bool { return r.Final() && !r.Succeeded() }

// ValidName checks a peer name: a DNS-label-like name of at most 63
// characters, [a-z0-9]([-a-z0-9.]*[a-z0-9])?. The name is a file name in a
// shared directory, so it can be neither a dotfile nor a path.
func ValidName(name string) error {
	switch {
	case name == "":
		return errors.New("peer name is empty")
	case len(name) > 63:
		return fmt.Errorf("peer name %s is longer than 63 characters", quote(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '-' || c == '.':
			if i == 0 || i == len(name)-1 {
				return fmt.Errorf("peer name %s must start and end with a lowercase letter or digit", quote(name))
			}
		default:
			return fmt.Errorf("peer name %s has %q: use lowercase letters, digits, '-' and '.'", quote(name), rune(c))
		}
	}
	return nil
}

// quote keeps an error about a hostile name on one short line.
func quote(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q...", s[:64])
	}
	return fmt.Sprintf("%q", s)
}

// ValidCode checks an exit code: 0 to 255, what a process can exit with.
func ValidCode(code int) error {
	if code < 0 || code > 255 {
		return fmt.Errorf("exit code %d is out of range 0 to 255", code)
	}
	return nil
}

// normal fills in what an older or hand-written record may leave out: a
// final record without a reason is an exit.
func (r Record) normal() Record {
	if r.Final() && r.Reason == "" {
		r.Reason = Exited
	}
	return r
}

// Validate checks that the record is one a peer could have written: a valid
// name, a code from 0 to 255, a reason that fits the code, and a stop that
// names a signal; so that no combination of fields can read as a success it
// is not.
func (r Record) Validate() error {
	if err := ValidName(r.Name); err != nil {
		return err
	}
	if r.Running {
		if r.ExitCode != 0 || r.Reason != "" || r.Stop != (Stop{}) {
			return fmt.Errorf("record %s: a running record has no exit code, reason or stop", r.Name)
		}
		return nil
	}
	if err := ValidCode(r.ExitCode); err != nil {
		return fmt.Errorf("record %s: %w", r.Name, err)
	}
	if err := r.Stop.validate(); err != nil {
		return fmt.Errorf("record %s: %w", r.Name, err)
	}
	switch r.Reason {
	case "", Exited:
	case Signaled:
		if r.ExitCode <= 128 {
			return fmt.Errorf("record %s: reason %s needs code 128+N, got %d", r.Name, r.Reason, r.ExitCode)
		}
	case NotReady, Lost:
		if r.ExitCode == 0 {
			return fmt.Errorf("record %s: reason %s needs a non-zero exit code", r.Name, r.Reason)
		}
	default:
		return fmt.Errorf("record %s: unknown reason %s", r.Name, quote(string(r.Reason)))
	}
	return nil
}

func encode(r Record) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("record %s: encode: %w", r.Name, err)
	}
	return append(b, '\n'), nil
}

// decode parses a record file. Unknown fields are allowed, so a newer exec
// can add some; missing name, or a final record without exit_code, is not.
func decode(b []byte) (Record, error) {
	var w struct {
		Name     *string   `json:"name"`
		Running  bool      `json:"running"`
		ExitCode *int      `json:"exit_code"`
		Reason   Reason    `json:"reason"`
		Time     time.Time `json:"time"`
		Stop     Stop      `json:"stop"`
		Started  time.Time `json:"started"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return Record{}, fmt.Errorf("not a record: %w", err)
	}
	if w.Name == nil {
		return Record{}, errors.New("not a record: no name")
	}
	if w.ExitCode == nil && !w.Running {
		return Record{}, fmt.Errorf("record %s: final, but no exit_code", quote(*w.Name))
	}
	r := Record{Name: *w.Name, Running: w.Running, Reason: w.Reason, Time: w.Time, Stop: w.Stop, Started: w.Started}
	if w.ExitCode != nil {
		r.ExitCode = *w.ExitCode
	}
	r = r.normal()
	if err := r.Validate(); err != nil {
		return Record{}, err
	}
	return r, nil
}
