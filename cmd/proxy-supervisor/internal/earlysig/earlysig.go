// Package earlysig takes the signals that supervise and exec answer before
// any other of the project's code runs, and holds them for the command.
//
// Until a signal is subscribed, Go's runtime gives it its default action,
// which for SIGTERM in PID 1 is exit 2, the code of bad usage, with no log
// line. A subscription in the command (runSupervise) came after the
// runtime's setup, every package's initialisation and main's tuning, and a
// SIGTERM sent right after the supervisor's exec met that default in about
// half of such starts. Go initialises a package after those it imports, and
// among those ready first the one whose import path sorts first: this one
// imports nothing of the project and sorts before every other package of
// it (cmd/ before internal/), so its init runs once os/signal's has.
// What comes earlier still, while the runtime starts, the guard at the
// binary's entry keeps or answers (entry.go), and init hands on what it
// kept.
//
// The other commands answer no signal and keep Go's default actions, as
// before: for them nothing is subscribed (the command is os.Args[1], set
// before any package's init), which also spares their start the
// subscription's cost, a round trip to the runtime's signal thread a
// signal.
package earlysig

import (
	"os"
	"os/signal"
	"slices"
	"syscall"
)

// Commands are those whose signals are held: they take them over with Hand.
var Commands = []string{"supervise", "exec"}

// Signals are those held: the stop signals, which met Go's default when
// they came early, and the others that supervise or exec answer. SIGPIPE is
// not: nothing writes before the command subscribes its own.
var Signals = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT,
	syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2,
}

// held keeps what comes before the command takes over; repeats beyond it
// are dropped, and a repeat means what one does.
var held = make(chan os.Signal, 2*len(Signals))

func init() {
	hold := len(os.Args) > 1 && slices.Contains(Commands, os.Args[1])
	if hold {
		signal.Notify(held, Signals...)
	}
	// What came before the runtime's handlers (entry.go), in the order of
	// the signals' numbers: the guard keeps which, not when.
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		if early&(1<<sig) == 0 {
			continue
		}
		if hold {
			held <- sig
			continue
		}
		// A command that answers no signal gets the default action:
		// the runtime's, by the signal (or, in PID 1, the guard's exit
		// 128+signal).
		syscall.Kill(os.Getpid(), sig)
		os.Exit(128 + int(sig))
	}
}

// Hand ends the early subscription and gives each signal held to to, in
// its order. The command calls it once its own subscription is in place,
// so that no signal falls between the two; one that comes in that moment
// reaches both, and is given twice. Without an early subscription (another
// command, or a test binary) it gives nothing.
func Hand(to func(os.Signal)) {
	signal.Stop(held)
	for {
		select {
		case sig := <-held:
			to(sig)
		default:
			return
		}
	}
}
