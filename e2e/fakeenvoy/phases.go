package fakeenvoy

import (
	"context"
	"fmt"
	"time"
)

// runPhases walks Envoy's start-up: the admin port is bound after BindDelay; the main
// loop, which answers it, runs SilentFor later; then the init manager takes InitDelay,
// half of it before the cluster manager is initialised (PRE_INITIALIZING), half after
// (INITIALIZING); then the workers start and the server is LIVE.
func (e *Envoy) runPhases() {
	defer e.wg.Done()
	if !e.sleep(context.Background(), e.opts.BindDelay) {
		return
	}
	if err := e.serveAdmin(); err != nil {
		e.reportFatal(err)
		return
	}
	e.log.Info(fmt.Sprintf("loading %d listener(s)", len(e.listeners)), loggerAttr("config"))
	if !e.sleep(context.Background(), e.opts.SilentFor) {
		return
	}
	e.mu.Lock()
	e.loopUp = true
	e.mu.Unlock()
	e.updateAnswering()
	e.log.Info("starting main dispatch loop", loggerAttr("main"))
	half := e.opts.InitDelay / 2
	if !e.sleep(context.Background(), half) {
		return
	}
	e.advance(initializing)
	e.log.Info("cm init: all clusters initialized", loggerAttr("upstream"))
	if e.opts.StayInitializing || !e.sleep(context.Background(), e.opts.InitDelay-half) {
		return
	}
	e.finishInit(true)
}

// sleep waits d unless ctx ends or the fake shuts down first.
func (e *Envoy) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-e.stop:
			return false
		default:
			return ctx.Err() == nil
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-e.stop:
		return false
	}
}

// advance moves the init phase forward on its own, unless a fixture took over.
func (e *Envoy) advance(p initPhase) {
	e.change(func() bool {
		if e.manual || e.phase >= p {
			return false
		}
		e.phase = p
		return true
	})
}

func (e *Envoy) setPhase(p initPhase) {
	e.change(func() bool { e.phase = p; return true })
}

// goLive is SetState(LIVE) or SetState(DRAINING).
func (e *Envoy) goLive(healthCheckFailed bool) {
	e.mu.Lock()
	e.hcFailed = healthCheckFailed
	e.mu.Unlock()
	e.finishInit(false)
}

// finishInit ends initialisation: the workers start (and OnInit runs) before anyone can
// see LIVE. auto is the start-up phases' own move, which a fixture's SetState overrides.
func (e *Envoy) finishInit(auto bool) {
	overridden := func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return auto && e.manual
	}
	if overridden() {
		return
	}
	if err := e.startWorkers(); err != nil {
		e.reportFatal(err)
		return
	}
	e.mu.Lock()
	if auto && e.manual || e.shutting {
		e.mu.Unlock()
		return
	}
	e.phase = initialized
	e.mu.Unlock()
	// Envoy refreshes the server gauges as soon as initialisation is done; afterwards
	// only each stats flush does.
	e.updateServerStats()
	e.initOnce.Do(func() { close(e.initialized) })
}

func (e *Envoy) startWorkers() error {
	var err error
	e.workersOnce.Do(func() {
		if e.opts.OnInit != nil {
			e.opts.OnInit()
		}
		e.log.Info("all dependencies initialized. starting workers", loggerAttr("main"))
		for _, l := range e.listeners {
			if err = l.start(); err != nil {
				return
			}
		}
		s := e.stats
		for _, name := range []string{
			"cluster_manager.cds.update_attempt", "cluster_manager.cds.update_success",
			"listener_manager.lds.update_attempt", "listener_manager.lds.update_success",
		} {
			s.counter(name).add(1)
		}
		s.counter("listener_manager.listener_create_success").add(int64(len(e.listeners) * e.opts.Concurrency))
		s.gauge("listener_manager.workers_started").set(1)
	})
	return err
}

// flushStats is Envoy's stats flush timer.
func (e *Envoy) flushStats() {
	defer e.wg.Done()
	t := time.NewTicker(e.opts.StatsFlush)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			e.updateServerStats()
		case <-e.stop:
			return
		}
	}
}
