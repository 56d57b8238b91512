package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/reaper"
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
	p, err := Start(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill("test cleanup") })
	return p
}

func waitExit(t *testing.T, p *Process, d time.Duration) reaper.Exit {
	t.Helper()
	ch := make(chan reaper.Exit, 1)
	go func() { ch <- p.Wait() }()
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
		{[]string{"/etc/passwd"}, 126},
		{nil, 127},
	} {
		_, err := Start(r, Config{Command: tt.cmd})
		var se *StartError
		if !errors.As(err, &se) || se.Code != tt.code {
			t.Errorf("Start(%v) = %v; want a StartError with code %d", tt.cmd, err, tt.code)
		}
	}
}

// The stop sequence: Quit first; a proxy that ignores it gets SIGTERM after
// the grace; one that ignores that too gets SIGKILL at the timeout.
func TestStopEscalates(t *testing.T) {
	var (
		mu    sync.Mutex
		sent  []syscall.Signal
		quits int
	)
	p := run(t, Config{
		// A shell that ignores TERM, as a hung proxy would.
		Command: []string{"/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"},
		Quit: func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			quits++
			return errors.New("admin API gone")
		},
		QuitGrace:   50 * time.Millisecond,
		StopTimeout: 300 * time.Millisecond,
		Escalated: func(sig syscall.Signal) {
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, sig)
		},
	})
	if st, _ := p.State(); st != Running {
		t.Fatalf("state %v after Start", st)
	}
	began := time.Now()
	if !p.Stop("test") {
		t.Fatal("Stop of a running proxy did not start the sequence")
	}
	if p.Stop("again") {
		t.Error("a second Stop started another sequence")
	}
	if st, why := p.State(); st != Stopping || why != "test" {
		t.Errorf("state %v (%q); want stopping (test)", st, why)
	}
	e := waitExit(t, p, 5*time.Second)
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Errorf("exited after %v, before the stop timeout", took)
	}
	if e.Code() != 137 {
		t.Errorf("exit %v; want killed by SIGKILL", e)
	}
	mu.Lock()
	defer mu.Unlock()
	if quits != 1 || len(sent) != 2 || sent[0] != syscall.SIGTERM || sent[1] != syscall.SIGKILL {
		t.Errorf("quits %d, signals %v; want one quit, then SIGTERM and SIGKILL", quits, sent)
	}
	if st, _ := p.State(); st != Exited {
		t.Errorf("state %v after the exit", st)
	}
	if p.Stop("after exit") {
		t.Error("Stop after the exit started a sequence")
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
	p.Stop("test")
	if e := waitExit(t, p, 5*time.Second); e.Code() != 128+int(syscall.SIGINT) {
		t.Errorf("exit %v", e)
	}
	if escalated.Load() {
		t.Error("escalated; the quit was enough")
	}
}

// Wait kills what the leader left in its group.
func TestWaitKillsTheGroup(t *testing.T) {
	p := run(t, Config{Command: []string{"/bin/sh", "-c", "sleep 60 & exit 3"}})
	if e := waitExit(t, p, 5*time.Second); e.Code() != 3 {
		t.Fatalf("exit %v", e)
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(-p.Pid(), 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the leader's child outlived it")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
