package supervise

import "sync"

// outcome is the supervisor's exit code, fixed by the first decisive event
// (DESIGN.md's table): every peer succeeded, a peer failed, a signal asked us
// to go, or the proxy exited by itself. Later events are logged by their
// callers but change nothing, so a proxy that crashes while we stop it after a
// successful Job still leaves 0.
type outcome struct {
	mu   sync.Mutex
	set  bool
	code int
	why  string
}

// decide fixes the code unless it is fixed already, and reports whether this
// call fixed it.
func (o *outcome) decide(code int, why string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.set {
		return false
	}
	o.set, o.code, o.why = true, code, why
	return true
}

// get returns the code and the event that fixed it.
func (o *outcome) get() (int, string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.code, o.why
}

// decided reports whether the code is fixed.
func (o *outcome) decided() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.set
}
