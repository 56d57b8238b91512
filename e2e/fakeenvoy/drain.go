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
	// envoy#35020, fixed by envoy#38430: the drain's direction.
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
// now on their connections are told to close, as far as the release and the
// listener's filter tell them (noticeDrain). It reports false when a drain
// covering the direction is under way already.
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
		for c := range l.conns {
			l.noticeDrain(c)
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

// noticeDrain is what a drain does to one connection of a listener it
// covers, on the chosen release. Called with e.mu held.
func (l *dataListener) noticeDrain(c *dataConn) {
	v := l.e.opts.Version
	if l.cfg.TCP && !l.checksDrain() {
		return // tcp_proxy: told nothing
	}
	l.scheduleDrain(c)
	if !l.cfg.TCP && v.proactiveDrain() {
		l.scheduleProactive(c)
	}
}

// checksDrain is whether a tcp_proxy listener's connections act on a drain
// (EnvoyVersion.tcpProxyChecksDrain).
func (l *dataListener) checksDrain() bool {
	return l.cfg.CheckDrainClose && l.e.opts.Version.tcpProxyChecksDrain()
}

// hcmDrainTimeout is the HTTP connection manager's drain_timeout default.
const hcmDrainTimeout = 5 * time.Second

// scheduleProactive is the next release's proactive drain of an HTTP
// connection (EnvoyVersion.proactiveDrain): at a moment drawn uniformly in
// the last third of the drain time, short of the connection manager's
// drain_timeout at its end, the connection is drained whatever it is doing
// (drainNow). There is none when that window is empty, or had opened already
// when the connection was told of the drain. Called with e.mu held.
func (l *dataListener) scheduleProactive(c *dataConn) {
	e := l.e
	d := e.opts.DrainTime
	timeout := l.cfg.DrainTimeout
	if timeout == 0 {
		timeout = hcmDrainTimeout
	}
	from, to := l.drainStart.Add(d*2/3), l.drainStart.Add(d-timeout)
	now := time.Now()
	if !to.After(from) || now.After(from) {
		return
	}
	due := from.Add(rand.N(to.Sub(from)))
	e.timers = append(e.timers, time.AfterFunc(due.Sub(now), func() { l.drainNow(c) }))
}

// scheduleDrain gives a connection the moment from which the drain tells it to
// close. Under "immediate" that is the drain's start. Under "gradual" Envoy tells a
// growing share of responses to close as the drain time passes; a moment drawn
// uniformly over the drain time gives the same share. Nothing happens at that moment:
// the connection's next response carries "connection: close", and a tcp_proxy one
// closes at its next bytes (serveTCP). Called with e.mu held.
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
