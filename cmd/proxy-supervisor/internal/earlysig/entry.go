package earlysig

// The guard at the process's entry (entry_linux_amd64.s, entry_linux_arm64.s).
//
// Between the exec and the runtime's own signal handlers, a stop signal
// meets its default action, and in PID 1 of a PID namespace (a container's
// entrypoint) the kernel drops a default-action signal: the SIGTERM is
// lost, and the kubelet waits out the grace period. Between the runtime's
// handlers and this package's subscription, the runtime's default for a
// signal nobody subscribed (kill by the signal) cannot kill PID 1 either,
// and it ends in exit 2, the code of bad usage. Under load both windows are
// seconds wide: the kubelet's SIGTERM to a pod deleted as it started gave
// an app container's exec exit 2.
//
// No Go code runs early enough to close them, so the binary's first
// instructions do, before they jump to the runtime's entry: SIGTERM and
// SIGINT get a small handler of their own. Until the runtime replaces it,
// the handler keeps the signal in early, and init hands it to the command
// as if it had come just after its subscription. Once the runtime's
// handler is in, Go's default action forwards an unsubscribed signal to
// the handler it replaced, this one: in PID 1 it exits 128+signal with a
// line; elsewhere it returns, and the default kills the process by the
// signal, as before.
//
// The guard is linked in by -ldflags=-E=proxy_supervisor_entry (Entry);
// a binary built without it starts at the runtime's entry and has only the
// subscription in init, as before the guard.

// Entry is the linker flag that makes the guard the binary's entry. Every
// build of the shipped binary passes it (Makefile, images/, the tests'
// builds); linux/amd64 and linux/arm64 only.
const Entry = "-E=proxy_supervisor_entry"

var (
	// entered is 1 when the process began at the guard.
	entered uint32
	// early has bit N set when signal N came before the runtime's
	// handlers; only the guard's handler writes it, before any Go code
	// runs, and init reads it.
	early uint32
	// pid1Line is what the handler writes before PID 1 exits on a signal
	// that the runtime's default would have ended in exit 2. A string:
	// static data, there before the runtime is.
	pid1Line = "proxy-supervisor: a stop signal came before the command could answer it; exit 128+signal\n"
)

// Guarded says whether the process began at the guard: false for a binary
// built without Entry.
func Guarded() bool { return entered == 1 }
