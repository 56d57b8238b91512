package fakeenvoy

import (
	"math/rand/v2"
	"net/http"
	"time"
)

// handleDrainListeners is POST /drain_listeners. Its flags count by presence, whatever
// their value, as Envoy's do.
func (e *Envoy) handleDrainListeners(w http.ResponseWriter, r *http.Request) {
	q := query(r)
	_, graceful := q["graceful"]
	_, inboundOnly := q["inboundonly"]
	_, skipExit := q["skip_exit"]
	if skipExit && !graceful {
		reply(w, http.StatusBadRequest, "", "skip_exit requires graceful\n")
		return
	}
	if graceful {
		e.drainGracefully(inboundOnly, skipExit)
	} else {
		e.stopListeners(inboundOnly)
	}
	reply(w, http.StatusOK, "", "OK\n")
}

// drainGracefully is Envoy's drain sequence: the listeners keep accepting for the drain
// time while their HTTP connections are told to close on their next response, then they
// stop unless skip_exit.
// TCP proxies never act on it. A drain that is already under way for the same scope
// changes nothing.
func (e *Envoy) drainGracefully(inboundOnly, skipExit bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.shutting || e.drainAll || (inboundOnly && e.drainIn) {
		return
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
	if !skipExit {
		e.timers = append(e.timers, time.AfterFunc(e.opts.DrainTime, func() { e.stopListeners(inboundOnly) }))
	}
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
