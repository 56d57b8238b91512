// Package envoy is the supervisor's view of Envoy: a client of its admin API
// (readiness, drain, stop, connection counts, listener ports) and the
// readiness tracker that polls it.
//
// Readiness is never remembered: the tracker's state rests on Envoy's last
// answer, a proxy that dies or answers anything but LIVE stops being ready
// at the next poll, and one that stops answering once the hold (3 s) is
// over. pilot-agent caches its first success, so its status port says
// ready after Envoy is gone; this package exists so that ours cannot.
package envoy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
)

// Admin is a client of Envoy's admin API. Every call is bounded by its
// context and by Timeout: Envoy binds the admin port before its event loop
// runs, so a connection can succeed and then hang.
type Admin struct {
	url     http1.URL        // tcp, or unix for admin.address.pipe
	tcp     []netip.AddrPort // a tcp URL's address, or localhost's two
	client  *http1.Client
	Timeout time.Duration
}

// maxBody bounds an admin answer; /stats with a filter and /listeners are a
// few kilobytes even for a large mesh config. A longer answer is an error:
// a cut-off /stats would read as missing lines, that is as zero
// connections, and no answer is better than a wrong one.
const maxBody = 4 << 20

// NewAdmin returns a client for the admin API at u, such as
// http://127.0.0.1:15000 (port 80 when none is given), or unix:///PATH for
// an admin API on a unix socket (admin.address.pipe), which no other
// container of the pod can reach unless it mounts the socket's directory.
// Its path, if any, is not used.
func NewAdmin(u http1.URL) *Admin {
	a := &Admin{
		url:     u,
		client:  &http1.Client{Dial: u.Dial(time.Second), Host: u.Host, MaxBody: maxBody},
		Timeout: 2 * time.Second,
	}
	if u.Network == "tcp" {
		a.tcp, _ = http1.TCPAddrs(u.Addr) // ParseURL gave it: it parses
	}
	return a
}

// Port is the admin API's TCP port, whose listener is the proxy's, not the
// app's; 0 when it is on a unix socket.
func (a *Admin) Port() uint16 { return a.url.Port() }

// Refused reports whether err means nothing listens on the admin port, which
// is different from an admin API that does not answer: a refusing Envoy is not
// running, so it has no connections; a silent one is unknown. On a unix
// socket, a path that does not exist (Envoy has not bound it yet, or removed
// it) is refused too.
func Refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

// StatusError is an answer with an unexpected HTTP status.
type StatusError struct {
	Path string
	Code int
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("admin %s: %d %s", e.Path, e.Code, strings.TrimSpace(e.Body))
}

// maxStateBody bounds GET /ready's answer, which Envoy makes its state
// name ("LIVE\n"): no more of a longer one is read, and it is an error,
// not a reason of megabytes for every /healthz/ready and /v1/status
// answer, and for every poll to read.
const maxStateBody = 4 << 10

func (a *Admin) do(ctx context.Context, method, path string, query http1.Query) (http1.Response, error) {
	return a.doMax(ctx, method, path, query, maxBody)
}

// doMax is do with its own bound on the answer's body.
func (a *Admin) doMax(ctx context.Context, method, path string, query http1.Query, bound int) (http1.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	target := path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	resp, err := a.client.DoMax(ctx, method, target, bound)
	if err != nil {
		return http1.Response{}, fmt.Errorf("admin %s: %w", path, err)
	}
	return resp, nil
}

// Listening reports whether anything accepts connections on the admin port.
// While a starting proxy leaves the port unbound, the tracker asks a hundred
// times a second, and an HTTP request that is refused leaves 2.4 kB of
// garbage each time (net/http's 5.6 kB doubled the supervisor's idle RSS);
// a bare connect on a loopback address leaves none (BenchmarkRefusedPoll,
// BenchmarkBoundRefused). Other addresses take the ordinary dialer. Of
// localhost's two addresses, either bound is bound, and ::1 that cannot
// be reached (a pod without IPv6 on lo) after 127.0.0.1 refused is unbound
// too, as DialTCP takes it.
func (a *Admin) Listening(ctx context.Context) (bool, error) {
	if a.url.Network == "unix" {
		return connectsUnix(a.url.Addr)
	}
	for i, ap := range a.tcp {
		bound, err := connectsTCP(ctx, ap)
		switch {
		case bound:
			return true, nil
		case err != nil && i == 0:
			return false, err
		case err != nil:
			return false, nil
		}
	}
	return false, nil
}

func connectsTCP(ctx context.Context, ap netip.AddrPort) (bool, error) {
	if ap.Addr().IsLoopback() {
		return connects(ctx, ap)
	}
	c, err := http1.DialTCP(ctx, 0, []netip.AddrPort{ap})
	if err != nil {
		if Refused(err) {
			return false, nil
		}
		return false, err
	}
	c.Close()
	return true, nil
}

// connects tries a TCP connect to a loopback address. On loopback the kernel
// answers at once, refused or accepted (into the backlog, even by an admin
// API whose loop is not running yet), except when the backlog is full: then
// it is bound, and the wait for the answer ends with ctx or probeMax.
// probeMax bounds a probe whose context has no deadline of its own.
const probeMax = 500 * time.Millisecond

func connects(ctx context.Context, ap netip.AddrPort) (bool, error) {
	family, sa := unix.AF_INET, unix.Sockaddr(nil)
	if ap.Addr().Is4() {
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return false, fmt.Errorf("admin probe: %w", err)
	}
	defer unix.Close(fd)
	err = unix.Connect(fd, sa)
	if errors.Is(err, unix.EINPROGRESS) {
		// A listener whose accept queue is full drops the SYN, and the
		// kernel retries for minutes: wait for the answer only as long as
		// ctx allows, and take no answer for a bound port.
		err = waitConnected(ctx, fd)
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ECONNREFUSED):
		return false, nil
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return true, nil
	default:
		return false, fmt.Errorf("admin probe: %w", err)
	}
}

// connectsUnix tries a connect to the unix socket at path. It answers at
// once: refused when the path is missing or nothing listens on it, bound
// when it connects or the listener's backlog is full (EAGAIN).
func connectsUnix(path string) (bool, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return false, fmt.Errorf("admin probe: %w", err)
	}
	defer unix.Close(fd)
	err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
	switch {
	case err == nil, errors.Is(err, unix.EAGAIN):
		return true, nil
	case errors.Is(err, unix.ECONNREFUSED), errors.Is(err, unix.ENOENT):
		return false, nil
	default:
		return false, fmt.Errorf("admin probe: %w", err)
	}
}

// waitConnected waits for a non-blocking connect on fd to finish, or ctx to
// end, and returns the connect's result.
func waitConnected(ctx context.Context, fd int) error {
	deadline := time.Now().Add(probeMax)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for {
		timeout := max(int(time.Until(deadline).Milliseconds()), 0)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, timeout)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return err
		case n == 0:
			return context.DeadlineExceeded
		}
		soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return err
		}
		if soerr != 0 {
			return unix.Errno(soerr)
		}
		return nil
	}
}

// ServerState asks GET /ready. It returns Envoy's state name (LIVE,
// PRE_INITIALIZING, INITIALIZING or DRAINING) and whether Envoy said ready.
// The state is the not-ready reason, so it is cut as --extra-ready-url's
// is (brief); an answer longer than maxStateBody is an error.
func (a *Admin) ServerState(ctx context.Context) (state string, ready bool, err error) {
	resp, err := a.doMax(ctx, "GET", "/ready", nil, maxStateBody)
	if err != nil {
		return "", false, err
	}
	state = brief(resp.Body)
	switch resp.Code {
	case 200:
		return state, state == "LIVE", nil
	case 503:
		return state, false, nil
	}
	return "", false, &StatusError{"/ready", resp.Code, state}
}

// Post calls a mutating endpoint, such as /quitquitquit or /drain_listeners,
// with its flags. Envoy's flags count by presence, so they go as bare keys,
// in the order given: the request is then the call the supervisor's log
// names (/drain_listeners?graceful&inboundonly&skip_exit).
func (a *Admin) Post(ctx context.Context, path string, flags ...string) error {
	q := make(http1.Query, len(flags))
	for i, f := range flags {
		q[i].Key = f
	}
	resp, err := a.do(ctx, "POST", path, q)
	if err != nil {
		return err
	}
	if resp.Code != 200 {
		return &StatusError{path, resp.Code, string(resp.Body)}
	}
	return nil
}

// Stats returns the integer stats whose names match filter (an RE2 partial
// match, as Envoy applies it). Only used stats are asked for, so a stat that is
// missing is zero.
func (a *Admin) Stats(ctx context.Context, filter string) (map[string]uint64, error) {
	q := http1.Query{{Key: "usedonly"}}
	if filter != "" {
		q = append(q, http1.Param{Key: "filter", Value: filter})
	}
	resp, err := a.do(ctx, "GET", "/stats", q)
	if err != nil {
		return nil, err
	}
	if resp.Code != 200 {
		return nil, &StatusError{"/stats", resp.Code, string(resp.Body)}
	}
	return parseStats(resp.Body), nil
}

// parseStats reads Envoy's text stats, `name: value` a line. Histograms and
// text readouts have other values and are skipped.
func parseStats(body []byte) map[string]uint64 {
	out := make(map[string]uint64)
	for line := range bytes.Lines(body) {
		name, val, ok := strings.Cut(string(bytes.TrimRight(line, "\r\n")), ": ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err != nil {
			continue
		}
		out[name] = n
	}
	return out
}

// Connections is what Envoy's stats say of the downstream connections that
// can hold a drain.
type Connections struct {
	// Active is every downstream connection on the listeners counted.
	Active int
	// Busy is Active less the HTTP connections with no request in flight.
	// Envoy's drain only puts "connection: close" on an HTTP/1
	// connection's next response, so an idle keep-alive stays open until
	// its client sends again or the idle timeout (an hour by default)
	// closes it: counted as active, it would hold every drain to its
	// bound (Istio #48409).
	Busy int
}

// istioQuietHCMs are the stat prefixes of the HTTP connection managers on
// Istio's own listeners, whose connections never hold a drain: 15090
// (Prometheus) and 15021 (the kubelet's probes).
var istioQuietHCMs = map[string]uint16{"stats": 15090, "agent": 15021}

// Connections counts the downstream connections Envoy holds, the way
// pilot-agent does: only the per-listener totals, not the per-worker copies,
// not the admin listener's own (listener.admin.* and its main_thread copy)
// and not listeners on the excluded ports (Istio's own, such as 15090 and
// 15021, which the kubelet and Prometheus keep busy). Of those, the HTTP
// connection managers' (http.<prefix>.*) tell which are busy: a connection
// of theirs is idle unless a request is in flight (downstream_rq_active; an
// upgraded connection such as a WebSocket keeps its request active for its
// whole life, and an HTTP/2 connection may carry several).
func (a *Admin) Connections(ctx context.Context, exclude []uint16) (Connections, error) {
	stats, err := a.Stats(ctx, `downstream_(cx|rq)_active$`)
	if err != nil {
		return Connections{}, err
	}
	return countConnections(stats, exclude), nil
}

// countConnections sums saturating: a garbled counter must not wrap a sum to
// zero or below and end a drain early.
func countConnections(stats map[string]uint64, exclude []uint16) Connections {
	type hcm struct{ cx, rq uint64 }
	var active uint64
	hcms := map[string]*hcm{}
	of := func(prefix string) *hcm {
		h := hcms[prefix]
		if h == nil {
			h = &hcm{}
			hcms[prefix] = h
		}
		return h
	}
	for name, v := range stats {
		if rest, ok := strings.CutPrefix(name, "http."); ok {
			if p, ok := strings.CutSuffix(rest, ".downstream_cx_active"); ok {
				of(p).cx = v
			} else if p, ok := strings.CutSuffix(rest, ".downstream_rq_active"); ok {
				of(p).rq = v
			}
			continue
		}
		if rest, ok := strings.CutPrefix(name, "listener."); ok && countedListener(rest, exclude) {
			active = addSat(active, v)
		}
	}
	var idle, inFlight uint64
	for prefix, h := range hcms {
		if prefix == "admin" || quietHCM(prefix, exclude) {
			continue
		}
		inFlight = addSat(inFlight, h.rq)
		if h.cx > h.rq {
			idle = addSat(idle, h.cx-h.rq)
		}
	}
	busy := uint64(0)
	if active > idle {
		busy = active - idle
	}
	// A request in flight is busy whatever the subtraction says (a quiet
	// HCM that was not recognized would make idle too large).
	busy = max(busy, min(inFlight, active))
	return Connections{Active: clampInt(active), Busy: clampInt(busy)}
}

// countedListener tells whether a listener's downstream_cx_active, named
// here without its "listener." prefix, counts.
func countedListener(rest string, exclude []uint16) bool {
	rest, ok := strings.CutSuffix(rest, ".downstream_cx_active")
	if !ok || rest == "admin" || strings.HasPrefix(rest, "admin.") || strings.Contains(rest, ".worker_") || strings.HasPrefix(rest, "envoy_internal_") {
		return false
	}
	p, ok := statPort(rest)
	return !ok || !slices.Contains(exclude, p)
}

// quietHCM tells whether an HTTP connection manager serves an excluded
// listener: by the port its stat prefix ends with, or by Istio's names.
func quietHCM(prefix string, exclude []uint16) bool {
	if p, ok := istioQuietHCMs[prefix]; ok && slices.Contains(exclude, p) {
		return true
	}
	p, ok := statPort(prefix)
	return ok && slices.Contains(exclude, p)
}

func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

func clampInt(v uint64) int {
	if v > math.MaxInt {
		return math.MaxInt
	}
	return int(v)
}

// statPort reads the port of a listener's stat prefix, such as 0.0.0.0_15006
// or [__]_8080. A listener with its own stat_prefix has none.
func statPort(prefix string) (uint16, bool) {
	i := strings.LastIndexByte(prefix, '_')
	if i < 0 {
		return 0, false
	}
	p, err := strconv.ParseUint(prefix[i+1:], 10, 16)
	return uint16(p), err == nil
}

// ListenerPorts returns the ports of the listeners Envoy reports in
// /listeners; sockets on them are the proxy's.
func (a *Admin) ListenerPorts(ctx context.Context) ([]uint16, error) {
	resp, err := a.do(ctx, "GET", "/listeners", http1.Query{{Key: "format", Value: "json"}})
	if err != nil {
		return nil, err
	}
	if resp.Code != 200 {
		return nil, &StatusError{"/listeners", resp.Code, string(resp.Body)}
	}
	return parseListeners(resp.Body)
}

type address struct {
	SocketAddress struct {
		PortValue uint16 `json:"port_value"`
	} `json:"socket_address"`
}

func parseListeners(body []byte) ([]uint16, error) {
	var doc struct {
		Statuses []struct {
			Local      address `json:"local_address"`
			Additional []struct {
				Address address `json:"address"`
			} `json:"additional_local_addresses"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("admin /listeners: %w", err)
	}
	var ports []uint16
	add := func(a address) {
		if p := a.SocketAddress.PortValue; p != 0 && !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	for _, s := range doc.Statuses {
		add(s.Local)
		for _, x := range s.Additional {
			add(x.Address)
		}
	}
	return ports, nil
}
