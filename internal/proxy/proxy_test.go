package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/clock/clocktest"
	"github.com/proxy-supervisor/proxy-supervisor/internal/reaper"
	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
)

// run starts cfg.Command under a reaper of its own, both stopped when the
// test ends. The tests in this package never run in
// parallel: a reaper takes every child of the process.
func run(t *testing.T, cfg Config) *Process {
	t.Helper()
	r, err := reaper.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	p := New(r, cfg)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill() })
	return p
}

func waitExit(t *testing.T, p *Process, d time.Duration) reaper.Exit {
	t.Helper()
	ch := make(chan reaper.Exit, 1)
	go func() {
		e := p.Wait()
		p.KillLeftovers()
		ch <- e
	}()
	select {
	case e := <-ch:
		return e
	case <-time.After(d):
		t.Fatalf("the proxy did not exit within %v", d)
		return reaper.Exit{}
	}
}

func TestStartErrors(t *testing.T) {
	r, err := reaper.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		cmd  []string
		code int
	}{
		{[]string{"/nonexistent/envoy"}, 127},
		{[]string{"no-such-proxy-supervisor-test-proxy"}, 127},
		{[]string{"/etc/passwd"}, 126},
		{nil, 127},
	} {
		err := New(r, Config{Command: tt.cmd}).Start()
		var se *StartError
		if !errors.As(err, &se) || se.Code != tt.code {
			t.Errorf("Start(%v) = %v; want a StartError with code %d", tt.cmd, err, tt.code)
		}
	}
}

// A proxy is forked once, and nothing stops or signals a proxy that was
// never forked: its pid is 0, and kill(-0) would signal the supervisor's
// own group.
func TestStartOnce(t *testing.T) {
	r, err := reaper.New()
	if err != nil {
		t.Fatal(err)
	}
	p := New(r, Config{Command: []string{"sleep", "60"}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if p.Stop() {
		t.Error("Stop before Start started a stop sequence")
	}
	p.Signal(syscall.SIGTERM) // would end this test if it reached our group
	p.Kill()
	if p.Pid() != 0 {
		t.Fatalf("Pid before Start = %d", p.Pid())
	}
	// Nothing asked before the fork holds after it: the proxy started
	// still stops.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if !p.Stop() {
		t.Error("Stop after a Kill before Start did not start the stop sequence")
	}
	waitExit(t, p, 10*time.Second)
	cancel() // one reaper at a time: two would take each other's exits
	p = run(t, Config{Command: []string{"sleep", "60"}})
	if err := p.Start(); err == nil {
		t.Error("a second Start forked again")
	}
}

// The proxy's standard input is /dev/null, as os/exec made it, never a
// closed descriptor that its first open would take.
func TestStdinIsDevNull(t *testing.T) {
	p := run(t, Config{Command: []string{"/bin/sh", "-c", `[ "$(readlink /proc/$$/fd/0)" = /dev/null ]`}})
	if e := waitExit(t, p, 5*time.Second); e.Code() != 0 {
		t.Fatalf("fd 0 of the proxy is not /dev/null: %v", e)
	}
}

// The stop sequence: Quit first, bounded by the grace; a proxy that ignores
// it gets SIGTERM when the grace has passed; one that ignores that too gets
// SIGKILL at the stop timeout, counted from the stop request. The sequence
// runs on a fake clock, so each step is seen at its instant: the test moves
// the time only once the sequence has armed the timer of the next step.
func TestStopEscalates(t *testing.T) {
	const (
		grace   = time.Second
		timeout = 3 * time.Second
	)
	var (
		mu     sync.Mutex
		sent   []syscall.Signal
		at     []time.Time
		quits  int
		quitAt time.Time
	)
	clk := clocktest.New()
	began := clk.Now()
	trapped := filepath.Join(t.TempDir(), "trapped")
	p := run(t, Config{
		// A shell that ignores TERM, as a hung proxy would, and says so.
		Command: []string{"/bin/sh", "-c", "trap '' TERM; : >" + trapped + "; while :; do sleep 0.05; done"},
		// An admin API that accepts and never answers.
		Quit: func(ctx context.Context) error {
			<-ctx.Done()
			mu.Lock()
			defer mu.Unlock()
			quits++
			quitAt = clk.Now()
			return ctx.Err()
		},
		QuitGrace:   grace,
		StopTimeout: timeout,
		Clock:       clk,
		Escalated: func(sig syscall.Signal) {
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, sig)
			at = append(at, clk.Now())
		},
	})
	if isClosed(p.Exited()) {
		t.Fatal("exited after Start")
	}
	proctest.Eventually(t, 5*time.Second, "the shell's trap", func() bool {
		_, err := os.Stat(trapped)
		return err == nil
	})
	if !p.Stop() {
		t.Fatal("Stop of a running proxy did not start the sequence")
	}
	if p.Stop() {
		t.Error("a second Stop started another sequence")
	}
	for _, step := range []time.Duration{grace, timeout} {
		if !clk.WaitArmed(began.Add(step), 5*time.Second) {
			t.Fatalf("no step armed at %v after the stop request; armed: %v", step, clk.Armed())
		}
		clk.Advance(began.Add(step).Sub(clk.Now()))
	}
	e := waitExit(t, p, 5*time.Second)
	if e.Code() != 137 {
		t.Errorf("exit %v; want killed by SIGKILL", e)
	}
	mu.Lock()
	defer mu.Unlock()
	if quits != 1 || len(sent) != 2 || sent[0] != syscall.SIGTERM || sent[1] != syscall.SIGKILL {
		t.Fatalf("quits %d, signals %v; want one quit, then SIGTERM and SIGKILL", quits, sent)
	}
	for _, b := range []struct {
		what string
		at   time.Time
		want time.Duration
	}{
		{"the quit request given up", quitAt, grace},
		{"SIGTERM", at[0], grace},
		{"SIGKILL", at[1], timeout},
	} {
		if got := b.at.Sub(began); got != b.want {
			t.Errorf("%s %v after the stop request; want %v", b.what, got, b.want)
		}
	}
	if !isClosed(p.Exited()) {
		t.Error("Exited not closed after the exit")
	}
	if p.Stop() {
		t.Error("Stop after the exit started a sequence")
	}
}

// QuitGrace is capped by StopTimeout (docs/design.md, "Stopping the
// proxy"): a grace longer than the stop's bound gives the quit request
// only that bound, and SIGTERM and SIGKILL go at it, to the instant,
// never later.
func TestQuitGraceIsCappedByTheStopTimeout(t *testing.T) {
	const grace, timeout = 5 * time.Second, 2 * time.Second
	var (
		mu     sync.Mutex
		sent   []syscall.Signal
		at     []time.Time
		quitAt time.Time
	)
	clk := clocktest.New()
	began := clk.Now()
	trapped := filepath.Join(t.TempDir(), "trapped")
	p := run(t, Config{
		Command: []string{"/bin/sh", "-c", "trap '' TERM; : >" + trapped + "; while :; do sleep 0.05; done"},
		Quit: func(ctx context.Context) error {
			<-ctx.Done()
			mu.Lock()
			defer mu.Unlock()
			quitAt = clk.Now()
			return ctx.Err()
		},
		QuitGrace:   grace,
		StopTimeout: timeout,
		Clock:       clk,
		Escalated: func(sig syscall.Signal) {
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, sig)
			at = append(at, clk.Now())
		},
	})
	proctest.Eventually(t, 5*time.Second, "the shell's trap", func() bool {
		_, err := os.Stat(trapped)
		return err == nil
	})
	p.Stop()
	if !clk.WaitArmed(began.Add(timeout), 5*time.Second) {
		t.Fatalf("no step armed at the stop timeout %v; armed: %v", timeout, clk.Armed())
	}
	clk.Advance(timeout)
	if e := waitExit(t, p, 5*time.Second); e.Code() != 137 {
		t.Errorf("exit %v; want killed by SIGKILL", e)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := quitAt.Sub(began); got != timeout {
		t.Errorf("the quit request given up %v after the stop request; want the stop timeout %v", got, timeout)
	}
	if len(sent) != 2 || sent[0] != syscall.SIGTERM || sent[1] != syscall.SIGKILL || at[0].Sub(began) != timeout || at[1].Sub(began) != timeout {
		t.Errorf("signals %v at %v; want SIGTERM and SIGKILL at the stop timeout %v", sent, at, timeout)
	}
}

// A proxy that quits when asked is not signalled at all.
func TestStopByQuit(t *testing.T) {
	var escalated atomic.Bool
	pid := make(chan int, 1)
	p := run(t, Config{
		Command:     []string{"sleep", "60"},
		Quit:        func(context.Context) error { return syscall.Kill(-<-pid, syscall.SIGINT) },
		QuitGrace:   2 * time.Second,
		StopTimeout: 5 * time.Second,
		Escalated:   func(syscall.Signal) { escalated.Store(true) },
	})
	pid <- p.Pid()
	p.Stop()
	if e := waitExit(t, p, 5*time.Second); e.Code() != 128+int(syscall.SIGINT) {
		t.Errorf("exit %v", e)
	}
	if escalated.Load() {
		t.Error("escalated; the quit was enough")
	}
}

// KillLeftovers, after Wait, kills what the leader left in its group.
func TestWaitKillsTheGroup(t *testing.T) {
	p := run(t, Config{Command: []string{"/bin/sh", "-c", "sleep 60 & exit 3"}})
	if e := waitExit(t, p, 5*time.Second); e.Code() != 3 {
		t.Fatalf("exit %v", e)
	}
	proctest.Eventually(t, 5*time.Second, "the leader's child killed", func() bool {
		return syscall.Kill(-p.Pid(), 0) != nil
	})
}

// What a leader leaves in its group (an Envoy whose pilot-agent died) is
// watched once the leader has exited, and stopped by StopLeft: SIGTERM at
// QuitGrace (its Quit refused), and gone as soon as the reaper has reaped
// it, with no SIGKILL.
func TestStopLeftStopsWhatTheLeaderLeft(t *testing.T) {
	var mu sync.Mutex
	var sent []syscall.Signal
	p := run(t, Config{
		Command:     []string{"/bin/sh", "-c", "sleep 30 & exit 2"},
		Quit:        func(context.Context) error { return syscall.ECONNREFUSED },
		QuitGrace:   50 * time.Millisecond,
		StopTimeout: 5 * time.Second,
		Escalated: func(sig syscall.Signal) {
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, sig)
		},
	})
	if e := p.Wait(); e.Code() != 2 {
		t.Fatalf("the leader's exit %v, want code 2", e)
	}
	gone := p.Remains()
	if !p.groupAlive() || isClosed(gone) {
		t.Fatal("the sleep the leader left counts as gone")
	}
	if p.Stop() {
		t.Fatal("Stop started a sequence after the leader's exit")
	}
	began := time.Now()
	p.StopLeft(gone)
	if !isClosed(gone) {
		t.Fatal("StopLeft returned with the group still there")
	}
	// The reaper's word ends it, not the check every remainsCheck.
	if took := time.Since(began); took > remainsCheck*9/10 {
		t.Errorf("StopLeft took %v", took)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 1 || sent[0] != syscall.SIGTERM {
		t.Errorf("signals sent %v, want SIGTERM alone", sent)
	}
}
