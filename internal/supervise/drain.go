package supervise

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/health"
	"github.com/proxy-supervisor/proxy-supervisor/internal/portwatch"
)

// Drain pacing. The port scan is a netlink dump of listeners only (tens of
// microseconds), so it runs often. Envoy's stats are asked for at once when
// the app's ports are seen closed (until then the answer cannot end the
// drain), then at most every statsEvery: /stats runs on Envoy's main thread.
const (
	drainTick     = 10 * time.Millisecond
	statsEvery    = 100 * time.Millisecond
	drainProgress = time.Second
	adminCallMax  = 500 * time.Millisecond
)

// Ports whose connections do not hold a drain: Istio's health and Prometheus
// listeners, which the kubelet and scrapers keep busy (pilot-agent leaves them
// out too). The admin and health ports are added at run time.
var idlePorts = []uint16{15021, 15090}

// drain is one termination's drain. There is at most one per supervisor: the
// preStop hook and SIGTERM, whichever comes first, start it, and both wait on
// the same end.
type drain struct {
	done chan struct{}
	ok   bool   // the drain condition held (or there was nothing to wait for)
	why  string // how it ended
}

// Drain is POST /v1/drain: start the drain if it has not started, and wait for
// its end or ctx.
func (s *Supervisor) Drain(ctx context.Context) (bool, string) {
	// A preStop hook is the kubelet terminating the pod, as SIGTERM is, and
	// it comes first: the app's own SIGTERM (and the failure it may report)
	// must not decide how a deleted pod's proxy exits.
	if s.tracker.EverReady() {
		s.out.decide(0, "preStop")
	}
	done := s.startDrain("preStop")
	select {
	case <-done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.drain.ok, s.drain.why
	case <-ctx.Done():
		return false, "still draining when the request's wait ended"
	}
}

func (s *Supervisor) startDrain(trigger string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drain != nil {
		s.log.Info("drain already started", "trigger", trigger)
		return s.drain.done
	}
	d := &drain{done: make(chan struct{})}
	s.drain = d
	go s.runDrain(d, trigger)
	return d.done
}

func (s *Supervisor) runDrain(d *drain, trigger string) {
	start := time.Now()
	s.m.setState("draining")
	s.log.Info("drain started", "trigger", trigger, "min", s.cfg.DrainMin, "timeout", s.cfg.DrainTimeout)
	s.failHealthcheck()
	envoyPorts := s.refreshEnvoyPorts()

	end, ok := s.waitDrained(start, envoyPorts)
	took := time.Since(start)
	s.m.drainSeconds.Set(took.Seconds())
	s.m.drains.With(end).Inc()
	s.log.Info("drain ended", "end", end, "after", took.Round(time.Millisecond))
	s.mu.Lock()
	d.ok, d.why = ok, end
	s.mu.Unlock()
	close(d.done)
}

// failHealthcheck is for edge proxies that load balancers health-check
// through Envoy (--drain-healthcheck-fail). It is off by default because it
// makes Envoy hint every connection to close, outbound ones included, while
// the app may still be finishing an upload through it.
func (s *Supervisor) failHealthcheck() {
	if !s.cfg.DrainHealthcheckFail {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminCallMax)
	defer cancel()
	if err := s.cfg.Admin.Post(ctx, "/healthcheck/fail"); err != nil {
		s.log.Warn("admin /healthcheck/fail failed; draining anyway", "err", err)
	}
}

// drainListeners asks Envoy to drain its listeners gracefully. The drain
// loop calls it until it succeeds once: a busy admin API at the first try
// must not leave Envoy undrained for the whole termination.
func (s *Supervisor) drainListeners() error {
	ctx, cancel := context.WithTimeout(context.Background(), adminCallMax)
	defer cancel()
	flags := []string{"graceful"}
	if s.cfg.DrainInboundOnly {
		flags = append(flags, "inboundonly")
	}
	return s.cfg.Admin.Post(ctx, "/drain_listeners", flags...)
}

// waitDrained waits until the app has no listening sockets and Envoy holds no
// downstream connections, no sooner than DrainMin and no later than
// DrainTimeout. Completed peers end it at once: there is nothing left to wait
// for.
func (s *Supervisor) waitDrained(start time.Time, envoyPorts []uint16) (end string, ok bool) {
	earliest, deadline := start.Add(s.cfg.DrainMin), start.Add(s.cfg.DrainTimeout)
	exclude := append([]uint16{s.cfg.Admin.Port()}, idlePorts...)
	exclude = append(exclude, s.cfg.Owner.ProxyPorts...)
	settled := s.settledCh()
	tick := time.NewTicker(drainTick)
	defer tick.Stop()
	var lastLog, lastStats, lastDrainTry time.Time
	drained, conns := false, -1
	var cerr error
	for {
		select {
		case <-settled:
			return "peers-completed", true
		default:
		}
		if !drained && time.Since(lastDrainTry) >= drainProgress {
			lastDrainTry = time.Now()
			if err := s.drainListeners(); err != nil {
				s.log.Warn("admin /drain_listeners failed; will try again", "err", err)
			} else {
				drained = true
			}
		}
		ports, perr := s.appPorts(envoyPorts)
		switch {
		case perr != nil || len(ports) > 0:
			conns, cerr = -1, nil // unknown, and not needed yet
		case conns < 0 || time.Since(lastStats) >= statsEvery:
			lastStats = time.Now()
			conns, cerr = s.activeConnections(exclude)
		}
		now := time.Now()
		if perr == nil && len(ports) == 0 && conns == 0 && !now.Before(earliest) {
			return "drained", true
		}
		if !now.Before(deadline) {
			s.log.Warn("drain timed out", "open_ports", fmt.Sprint(ports), "connections", conns, "timeout", s.cfg.DrainTimeout)
			return "timeout", false
		}
		if now.Sub(lastLog) >= drainProgress {
			lastLog = now
			attrs := []any{"open_ports", fmt.Sprint(ports), "remaining", deadline.Sub(now).Round(100 * time.Millisecond)}
			if conns >= 0 {
				attrs = append(attrs, "connections", conns)
			}
			if perr != nil {
				attrs = append(attrs, "scan_err", perr)
			}
			if cerr != nil {
				attrs = append(attrs, "admin_err", cerr)
			}
			if now.Before(earliest) {
				attrs = append(attrs, "min_left", earliest.Sub(now).Round(100*time.Millisecond))
			}
			s.log.Info("draining", attrs...)
		}
		select {
		case <-settled:
			return "peers-completed", true
		case <-tick.C:
		}
	}
}

// appPorts lists the ports the app still listens on.
func (s *Supervisor) appPorts(envoyPorts []uint16) ([]uint16, error) {
	socks, err := s.scanner.Listening()
	if err != nil {
		return nil, err
	}
	return portwatch.Ports(s.cfg.Owner.AppSockets(socks, envoyPorts)), nil
}

// activeConnections asks Envoy how many downstream connections it holds. An
// admin API that refuses connections means Envoy is not running, so it holds
// none; one that does not answer is unknown, and the drain waits on.
func (s *Supervisor) activeConnections(exclude []uint16) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), adminCallMax)
	defer cancel()
	n, err := s.cfg.Admin.ActiveConnections(ctx, exclude)
	switch {
	case health.Refused(err):
		return 0, nil
	case err != nil:
		return -1, err
	}
	return n, nil
}

// learnEnvoyPorts remembers the ports of Envoy's listeners once it is ready,
// so that a drain knows them even if the admin API is slow by then.
func (s *Supervisor) learnEnvoyPorts(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ports, err := s.cfg.Admin.ListenerPorts(ctx)
	if err != nil {
		s.log.Warn("admin /listeners failed; Envoy's ports will be read at drain", "err", err)
		return
	}
	s.mu.Lock()
	s.envoyPorts = ports
	s.mu.Unlock()
}

func (s *Supervisor) refreshEnvoyPorts() []uint16 {
	ctx, cancel := context.WithTimeout(context.Background(), adminCallMax)
	defer cancel()
	ports, err := s.cfg.Admin.ListenerPorts(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.envoyPorts = ports
	} else if !errors.Is(err, context.DeadlineExceeded) && !health.Refused(err) {
		s.log.Warn("admin /listeners failed; using the ports learned at start", "err", err)
	}
	return s.envoyPorts
}
