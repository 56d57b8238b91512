package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// defaultAction are the signals whose kernel default (terminate, or dump core)
// ends Envoy: TERM, INT, HUP and USR1 until it is initialised (it handles them
// then), the rest always. Go's runtime would ignore USR1, USR2, ALRM, VTALRM,
// IO, PWR, XCPU and XFSZ, and answer QUIT, TRAP, SYS and STKFLT with a
// goroutine dump and exit 2.
var defaultAction = []syscall.Signal{
	unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGQUIT, unix.SIGTRAP, unix.SIGSYS, unix.SIGSTKFLT,
	unix.SIGALRM, unix.SIGVTALRM, unix.SIGIO, unix.SIGPWR, unix.SIGXCPU, unix.SIGXFSZ,
}

// fatalSignals are the ones Envoy's crash handler catches from the start
// (its FATAL_SIGS): it logs the signal and a backtrace, then re-raises it.
// Go would turn one sent by kill into a goroutine dump and exit 2.
var fatalSignals = []os.Signal{unix.SIGSEGV, unix.SIGABRT, unix.SIGBUS, unix.SIGILL, unix.SIGFPE}

// signalDescription is strsignal's text, which Envoy's crash log shows.
func signalDescription(sig syscall.Signal) string {
	switch sig {
	case unix.SIGSEGV:
		return "Segmentation fault"
	case unix.SIGABRT:
		return "Aborted"
	case unix.SIGBUS:
		return "Bus error"
	case unix.SIGILL:
		return "Illegal instruction"
	case unix.SIGFPE:
		return "Floating point exception"
	}
	return sig.String()
}

// restoreDefaultActions gives sigs the kernel's default action. Go's runtime would
// otherwise stand in between: it catches and ignores USR1 and USR2, which kill Envoy.
// signal.Ignore first makes the runtime forget the signal, so that a later
// signal.Notify installs its handler again.
func restoreDefaultActions(sigs ...syscall.Signal) error {
	for _, sig := range sigs {
		signal.Ignore(sig)
		if err := setDefaultAction(sig); err != nil {
			return err
		}
	}
	return nil
}

// setDefaultAction is sigaction(sig, SIG_DFL). An all-zero kernel sigaction is SIG_DFL
// with no flags on every Linux layout.
func setDefaultAction(sig syscall.Signal) error {
	var act [4]uint64
	_, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig),
		uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	if errno != 0 {
		return os.NewSyscallError("rt_sigaction", errno)
	}
	return nil
}

// die re-raises sig with its default action, as Envoy's crash handler does after it
// printed the backtrace, so that the parent sees death by that signal. No core file is
// written: the test machine does not need one.
func die(sig syscall.Signal) {
	unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	setDefaultAction(sig)
	unix.Tgkill(unix.Getpid(), unix.Gettid(), sig)
	time.Sleep(time.Second) // delivery is asynchronous on a busy machine
	os.Exit(128 + int(sig))
}
