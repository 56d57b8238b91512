package fakeenvoy

import (
	"math/rand/v2"
	"net/http"
	"time"
)

// handleDrainListeners is POST /drain_listeners as the chosen release
// answers it (EnvoyVersion's methods tell which change came when). Its flags
// count by presence, whatever their value, as Envoy's do. inboundonly always
// chooses which listeners stop; which connections are told to close, and
// when listeners stop, depend on the release.
func (e *Envoy) handleDrainListeners(w http.ResponseWriter, r *http.Request) {
	v := e.opts.Version
	q := query(r)
	_, graceful := q["graceful"]
	_, inboundOnly := q["inboundonly"]
	_, skipExit := q["skip_exit"]
	if !v.knowsSkipExit() {
		skipExit = false // envoy#30003: an unknown parameter, ignored
	}
	if skipExit && !graceful && !v.nonGracefulDrains() {
		// envoy#30003 until envoy#47042.
		reply(w, http.StatusBadRequest, "", "skip_exit requires graceful\n")
		return
	}
	// envoy#35020, fixed by envoy#37873: the drain's direction.
	hintInboundOnly := inboundOnly && v.drainsOneDirection()
	switch {
	case graceful:
		e.drainGracefully(hintInboundOnly, inboundOnly, skipExit)
	case v.nonGracefulDrains():
		// envoy#47042: the drain starts, and the listeners stop at once
		// unless skip_exit.
		e.startDrain(hintInboundOnly)
		if !skipExit {
			e.stopListeners(inboundOnly)
		}
	default:
		// Before envoy#47042: the listeners stop, no connection is told.
		e.stopListeners(inboundOnly)
	}
	reply(w, http.StatusOK, "", "OK\n")
}

// drainGracefully is Envoy's graceful drain: the listeners keep accepting for
// the drain time while their HTTP connections are told to close, then the
// listeners in stop's scope stop unless skip_exit. A drain already under way
// that covers the direction changes nothing, not even its clock.
func (e *Envoy) drainGracefully(hintInboundOnly, stopInboundOnly, skipExit bool) {
	if !e.startDrain(hintInboundOnly) {
		return
	}
	if !skipExit {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.timers = append(e.timers, time.AfterFunc(e.opts.DrainTime, func() { e.stopListeners(stopInboundOnly) }))
	}
}

// startDrain starts the drain sequence on the listeners of a direction: from
// now on their HTTP connections are told to close (TCP proxies never act on
// it). It reports false when a drain covering the direction is under way
// already.
func (e *Envoy) startDrain(inboundOnly bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.shutting || e.drainAll || (inboundOnly && e.drainIn) {
		return false
	}
	if inboundOnly {
		e.drainIn = true
	} else {
		e.drainAll = true
	}
	now := time.Now()
	for _, l := range e.listeners {
		if inboundOnly && !l.cfg.Inbound || !l.drainStart.IsZero() {
			continue
		}
		l.drainStart = now
		if l.cfg.TCP {
			continue
		}
		for c := range l.conns {
			l.scheduleDrain(c)
		}
	}
	return true
}

// stopListeners stops accepting on every listener in scope; connections stay.
func (e *Envoy) stopListeners(inboundOnly bool) {
	for _, l := range e.listeners {
		if !inboundOnly || l.cfg.Inbound {
			l.stop()
		}
	}
}

// scheduleDrain gives an HTTP connection the moment from which the drain tells it to
// close. Under "immediate" that is the drain's start. Under "gradual" Envoy tells a
// growing share of responses to close as the drain time passes; a moment drawn
// uniformly over the drain time gives the same share. Nothing happens at that moment:
// the connection's next response carries "connection: close". Called with e.mu held.
func (l *dataListener) scheduleDrain(c *dataConn) {
	due := l.drainStart
	if d := l.e.opts.DrainTime; l.e.opts.DrainStrategy == "gradual" && d > 0 {
		due = due.Add(rand.N(d))
	}
	c.due = due
}

// drainCloseDue tells whether the response being written must carry
// "connection: close". Once the health check has failed, Envoy's drain manager says so
// on every listener, whatever a drain covers.
func (l *dataListener) drainCloseDue(c *dataConn) bool {
	e := l.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hcFailed {
		return true
	}
	return !l.drainStart.IsZero() && !time.Now().Before(c.due)
}
