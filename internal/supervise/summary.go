package supervise

import (
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock"
)

// The lifecycle summary: one short line that the supervisor writes, as it
// exits, to the container's termination message file, so that the pod's
// status (kubectl describe pod, lastState.terminated.message) says why the
// proxy ended without anyone reading its log.

// DefaultTerminationLog is the kubelet's default terminationMessagePath.
const DefaultTerminationLog = "/dev/termination-log"

// summaryMax bounds the line: the kubelet keeps 4096 bytes of a
// container's message, and less when the pod has many containers.
const summaryMax = 512

// summaryWait bounds the write: the file is a bind mount the kubelet made,
// written at once, but an exit must not wait on a path that blocks.
const summaryWait = 100 * time.Millisecond

// summary is the line for an exit with code: the code and what decided it,
// the time from start to the proxy's first readiness, and from the
// decisive event to now.
func (s *Supervisor) summary(code int, err error) string {
	return summaryLine(code, s.life.snapshot(), s.start, s.cfg.Clock.Now(), err)
}

// summaryLine is summary for the lifecycle seen as v, started at start and
// exiting at now; a zero v is a supervisor that nothing decided and that was
// never ready.
func summaryLine(code int, v snapshot, start, now time.Time, err error) string {
	why := v.decidedBy
	if why == "" {
		why = "nothing decided"
	}
	line := fmt.Sprintf("proxy-supervisor: exit %d (%s)", code, why)
	if v.readyAt.IsZero() {
		line += "; never ready"
	} else {
		line += fmt.Sprintf("; ready %v after start", roundMs(v.readyAt.Sub(start)))
	}
	if !v.decidedAt.IsZero() {
		line += fmt.Sprintf("; exit %v after the decision", roundMs(now.Sub(v.decidedAt)))
	}
	if err != nil {
		line += "; error: " + err.Error()
	}
	if len(line) > summaryMax {
		line = line[:summaryMax-3] + "..."
	}
	return line + "\n"
}

func roundMs(d time.Duration) time.Duration {
	if d < 10*time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

// writeSummary writes the summary to the termination message file, unless
// none is configured.
func (s *Supervisor) writeSummary(code int, err error) {
	writeTerminationLog(s.cfg.TerminationLog, s.summary(code, err), s.cfg.Clock, s.log)
}

// WriteFailure writes the termination message of a supervisor that New
// refused, which exits with code before anything ran.
func WriteFailure(cfg Config, code int, err error) {
	clk := clock.Or(cfg.Clock)
	writeTerminationLog(cfg.TerminationLog, summaryLine(code, snapshot{}, time.Time{}, clk.Now(), err), clk, cfg.Log)
}

// writeTerminationLog replaces the file's content with line, unless path
// is "". It never fails the exit and delays it by at most summaryWait: a
// failure, or a write still blocked then, is one log line.
func writeTerminationLog(path, line string, clk clock.Clock, log *slog.Logger) {
	if path == "" {
		return
	}
	done := make(chan error, 1)
	go func() { done <- writeNonBlocking(path, line, clk, clk.Now().Add(truncateFor)) }()
	bound := clk.NewTimer(summaryWait)
	defer bound.Stop()
	var werr error
	select {
	case werr = <-done:
	case <-bound.C():
		select {
		case werr = <-done: // it ended as the bound passed: what it did holds
		default:
			log.Info("termination message not written: the write did not end in time", "path", path, "bound", summaryWait)
			return
		}
	}
	if werr != nil {
		log.Info("termination message not written", "path", path, "err", werr)
	}
}

// Truncating a large file frees its blocks in the kernel, and a thread doing
// so holds the process's exit until it is done (about 20 ms a GiB on disk
// and 500 ms on tmpfs here): an O_TRUNC of a 4 GiB file held the exit past
// the bound, and the exit came before the line was written. So the file is
// cut from its end in steps of truncateStep, none of which holds the exit
// long, for truncateFor at most.
const (
	truncateStep = 64 << 20
	truncateFor  = summaryWait * 3 / 4
)

// messageMax is what the kubelet reads of the file: its last 4096 bytes.
const messageMax = 4096

// writeNonBlocking replaces the file's content with line, cutting the file
// until deadline. It never creates the file (the kubelet does), and opens it
// without blocking, so that a FIFO without a reader fails at once rather
// than hanging the exit.
func writeNonBlocking(path, line string, clk clock.Clock, deadline time.Time) error {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		_, err := f.WriteString(line) // a FIFO or a device has no offset
		return err
	}
	m := message{f: f, line: line, size: max(st.Size(), int64(len(line)))}
	if err := m.place(); err != nil {
		return err
	}
	for m.size > int64(len(line)) && clk.Now().Before(deadline) {
		if err := m.cut(max(m.size-truncateStep, int64(len(line)))); err != nil {
			return err
		}
	}
	return nil
}

// message keeps a termination message file's tail, what the kubelet reads,
// the line at every step of cutting the file to it: the exit can come
// between any two steps (the write's bound ends, or the process is
// starved on a busy node), and a cut file's new tail is the old file's
// middle, zeros in a file that was allocated and never written.
type message struct {
	f    *os.File
	line string
	size int64 // the file's size, or the line's length if that is larger
}

// place writes the line at the end of the file's tail, after blanks.
func (m *message) place() error {
	tail := min(m.size, messageMax)
	b := make([]byte, tail)
	for i := range b[:tail-int64(len(m.line))] {
		b[i] = ' '
	}
	copy(b[tail-int64(len(m.line)):], m.line)
	_, err := m.f.WriteAt(b, m.size-tail)
	return err
}

// cut shrinks the file to size, placing the line where the new tail will
// be before the file ends there.
func (m *message) cut(size int64) error {
	m.size = size
	if err := m.place(); err != nil {
		return err
	}
	return m.f.Truncate(size)
}
