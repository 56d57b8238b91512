package supervise

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// handled is the explicit list of signals the supervisor acts on. Anything
// else keeps Go's default, which for SIGURG (the runtime's own preemption
// signal, sent to ourselves many times a second) is to ignore it: scuttle
// caught every signal and took SIGURG for a stop request. SIGCHLD is the
// reaper's.
var handled = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGHUP, syscall.SIGUSR2,
}

// ignorePipe keeps a closed log pipe from killing the supervisor: Go exits on
// SIGPIPE from a write to fd 1 or 2 unless the signal is notified, and then
// the write only fails. Notify, not Ignore: an ignored disposition would be
// inherited by the proxy across exec.
func ignorePipe() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// notifySignals subscribes before the proxy starts: a signal that arrived
// between the fork and a later subscription would get Go's default action,
// which for SIGTERM is to exit at once and leave the proxy unsupervised.
// Buffered so that a storm does not stall the sender; repeats of one signal
// mean the same as one, so a drop costs nothing.
func notifySignals() chan os.Signal {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, handled...)
	return ch
}

func (s *Supervisor) handleSignals(ctx context.Context) error {
	defer signal.Stop(s.sigs)
	for {
		select {
		case <-ctx.Done():
			return nil
		case sig := <-s.sigs:
			s.onSignal(sig.(syscall.Signal))
		}
	}
}

func (s *Supervisor) onSignal(sig syscall.Signal) {
	name := unix.SignalName(sig)
	s.log.Info("signal received", "signal", name)
	s.m.signals.With(name).Inc()
	switch sig {
	case syscall.SIGTERM, syscall.SIGINT:
		s.terminate(sig)
	case syscall.SIGQUIT:
		// The operator's emergency exit: no drain, no grace.
		s.out.decide(128+int(sig), "SIGQUIT")
		s.requestStopNow("SIGQUIT")
	case syscall.SIGUSR1:
		// Envoy reopens its access logs on SIGUSR1, but only once its
		// handlers are installed; before that the signal kills it. Sent to
		// the group, it reaches Envoy under pilot-agent too, which
		// pilot-agent itself never forwards.
		if !s.tracker.EverReady() {
			s.log.Warn("SIGUSR1 dropped: the proxy has not been ready yet, and Envoy dies of it before its handlers are installed")
			return
		}
		s.signalGroup(s.proxyPid(), sig)
		s.log.Info("SIGUSR1 forwarded to the proxy's group")
	default:
		// SIGHUP kills pilot-agent and SIGUSR2 kills Envoy; forwarding
		// either would turn a stray signal into an outage.
		s.log.Info("signal not forwarded", "signal", name)
	}
}

// terminate is SIGTERM's (or SIGINT's) way out: drain, then stop. The code is
// 0 once the proxy has been ready, because that is pod deletion or the end of
// a native sidecar. Before that it is 128+N: the kubelet sends SIGTERM after a
// failed postStart `wait`, and under OnFailure a 0 would leave the pod without
// a proxy.
func (s *Supervisor) terminate(sig syscall.Signal) {
	name := unix.SignalName(sig)
	ready := s.tracker.EverReady()
	s.mu.Lock()
	again := s.terminating
	s.terminating = true
	s.mu.Unlock()
	if again {
		s.log.Info("already terminating", "signal", name)
		return
	}
	code := 0
	if !ready {
		code = 128 + int(sig)
	}
	s.out.decide(code, name)
	if !ready {
		s.requestStop(name + " before the proxy was ever ready")
		return
	}
	done := s.startDrain(name)
	go func() {
		<-done
		s.requestStop(name)
	}()
}
