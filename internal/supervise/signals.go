package supervise

import (
	"context"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// The explicit lists of signals the supervisor acts on. Anything else keeps
// Go's default, which for SIGURG (the runtime's own preemption signal, sent
// to ourselves many times a second) is to ignore it: scuttle caught every
// signal and took SIGURG for a stop request. SIGCHLD is the reaper's.
var (
	stopSignals  = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT}
	otherSignals = []os.Signal{syscall.SIGUSR1, syscall.SIGHUP, syscall.SIGUSR2}
)

// Signals are the supervisor's subscriptions. Stop signals have a channel of
// their own: signal.Notify drops what does not fit a channel, and a storm of
// other signals must never crowd out a SIGTERM. Repeats of one signal mean
// the same as one, so a drop within either channel costs nothing.
//
// The command subscribes before any of its start's work (flags, records,
// sockets), and takes over what an earlier subscription of its own held
// (Held): until then a SIGTERM meets Go's default action, which in PID 1
// is exit 2, the code of bad usage, with no log line. What arrives before
// the proxy is started is held here and answered before the fork.
type Signals struct {
	stops  chan os.Signal
	others chan os.Signal
	pipe   chan os.Signal
}

// Subscribe starts the subscriptions. It also keeps a closed log pipe from
// killing the supervisor: Go exits on SIGPIPE from a write to fd 1 or 2
// unless the signal is notified, and then the write only fails. Notify, not
// Ignore: an ignored disposition would be inherited by the proxy across
// exec.
func Subscribe() *Signals {
	s := &Signals{
		stops:  make(chan os.Signal, 2*len(stopSignals)),
		others: make(chan os.Signal, 16),
		pipe:   make(chan os.Signal, 1),
	}
	signal.Notify(s.stops, stopSignals...)
	signal.Notify(s.others, otherSignals...)
	signal.Notify(s.pipe, syscall.SIGPIPE)
	return s
}

// Held takes a signal that came before Subscribe, held by an earlier
// subscription of the command's, as if it came after.
func (s *Signals) Held(sig os.Signal) {
	c := s.others
	if slices.Contains(stopSignals, sig) {
		c = s.stops
	}
	select {
	case c <- sig:
	default: // full: a repeat, which means what one does
	}
}

// Stop ends the subscriptions, except SIGPIPE's: the supervisor still logs
// after its group has ended. Twice is harmless.
func (s *Signals) Stop() {
	signal.Stop(s.stops)
	signal.Stop(s.others)
}

// handleSignals handles signals until ctx ends, stop signals first.
func (s *Supervisor) handleSignals(ctx context.Context, sigs *Signals) error {
	for {
		select {
		case sig := <-sigs.stops:
			s.onSignal(sig.(syscall.Signal))
			continue
		default:
		}
		select {
		case <-ctx.Done():
			return nil
		case sig := <-sigs.stops:
			s.onSignal(sig.(syscall.Signal))
		case sig := <-sigs.others:
			s.onSignal(sig.(syscall.Signal))
		}
	}
}

// stopSignalBeforeFork answers a stop signal that came before the proxy was
// started: there is nothing to drain or stop, so the supervisor exits with
// the table's code (128+N) without forking it.
func (s *Supervisor) stopSignalBeforeFork(sigs *Signals) (code int, stopped bool) {
	select {
	case v := <-sigs.stops:
		sig := v.(syscall.Signal)
		name := unix.SignalName(sig)
		s.log.Info("signal received before the proxy was started; not starting it", "signal", name)
		s.m.signals.With(name).Inc()
		s.life.record(Event{Kind: Signal, Signal: sig})
		code, _, _ = s.life.exitCode()
		return code, true
	default:
		return 0, false
	}
}

func (s *Supervisor) onSignal(sig syscall.Signal) {
	name := unix.SignalName(sig)
	s.log.Info("signal received", "signal", name)
	s.m.signals.With(name).Inc()
	switch sig {
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT:
		// The termination actor's to act on; once it has ended, the proxy
		// has exited and nothing is left to stop.
		s.toTermination(&termEvent{sig: sig})
	case syscall.SIGUSR1:
		// Envoy reopens its access logs on SIGUSR1, but only once its
		// handlers are installed; before that the signal kills it. Sent to
		// the group, it reaches Envoy under pilot-agent too, which
		// pilot-agent itself never forwards.
		if !s.life.everReady() {
			s.log.Warn("SIGUSR1 dropped: the proxy has not been ready yet, and Envoy dies of it before its handlers are installed")
			return
		}
		s.proc.Signal(sig)
		s.log.Info("SIGUSR1 forwarded to the proxy's group")
	default:
		// SIGHUP kills pilot-agent and SIGUSR2 kills Envoy; forwarding
		// either would turn a stray signal into an outage.
		s.log.Info("signal not forwarded", "signal", name)
	}
}
