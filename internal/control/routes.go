package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

type handler struct {
	b       Backend
	allowed []uint32
	log     *slog.Logger
	hooks   *hooks
}

// answer is what a request gets: a status and a value to send as JSON.
type answer struct {
	code  int
	body  any
	allow string // the Allow header of a 405
}

func reply(code int, v any) answer { return answer{code: code, body: v} }

func fail(code int, format string, args ...any) answer {
	return reply(code, map[string]string{"error": fmt.Sprintf(format, args...)})
}

// serve answers r as JSON.
func (h *handler) serve(ctx context.Context, r *http1.Request, body []byte) http1.Answer {
	return render(h.handle(ctx, r), body)
}

// render encodes a, on one line, after body.
func render(a answer, body []byte) http1.Answer {
	b, err := json.Marshal(a.body)
	if err != nil {
		a = fail(500, "encode the answer: %v", err)
		b, _ = json.Marshal(a.body)
	}
	extra := ""
	if a.allow != "" {
		extra = "Allow: " + a.allow + "\r\n"
	}
	return http1.Answer{Code: a.code, Type: "application/json", Extra: extra, Body: append(append(body, b...), '\n')}
}

// endpoint is one path of the socket: its method, the query parameters it
// takes, and what answers it.
type endpoint struct {
	method string
	params []string
	serve  func(h *handler, ctx context.Context, q http1.Query) answer
}

func lookup(path string) (endpoint, bool) {
	switch path {
	case "/v1/ready":
		return endpoint{"GET", []string{"wait"}, (*handler).ready}, true
	case "/v1/complete":
		return endpoint{"POST", []string{"exit_code", "peer", "reason", "stop_signal", "stopped_at"}, (*handler).complete}, true
	case "/v1/drain":
		return endpoint{"POST", []string{"wait"}, (*handler).drain}, true
	case "/v1/status":
		return endpoint{"GET", nil, (*handler).status}, true
	}
	return endpoint{}, false
}

// handle answers r, once it has what every request owes: an allowed uid,
// no body, a known path, the right method and known query parameters.
func (h *handler) handle(ctx context.Context, r *http1.Request) answer {
	if a, refused := h.refuse(ctx, r); refused {
		return a
	}
	// Everything is in the query. A body would only be something for a
	// slow client to trickle, so none is accepted (the connection ends,
	// whose next bytes would be that body).
	if r.Body {
		return fail(400, "requests take no body; parameters go in the query")
	}
	path, err := http1.PathUnescape(string(r.Path))
	if err != nil {
		return fail(400, "%v", err)
	}
	ep, ok := lookup(path)
	if !ok {
		return fail(404, "no such endpoint: %s", path)
	}
	if string(r.Method) != ep.method {
		a := fail(405, "%s needs %s, not %s", path, ep.method, r.Method)
		a.allow = ep.method
		return a
	}
	q, err := http1.ParseQuery(string(r.Query))
	if err != nil {
		return fail(400, "%v", err)
	}
	for _, p := range q {
		if !slices.Contains(ep.params, p.Key) {
			return fail(400, "unknown parameter %q", p.Key)
		}
	}
	return ep.serve(h, ctx, q)
}

func (h *handler) ready(ctx context.Context, q http1.Query) answer {
	wait, err := waitParam(q)
	if err != nil {
		return fail(400, "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if ok, why := h.b.WaitReady(ctx); !ok {
		return reply(503, map[string]any{"ready": false, "reason": why})
	}
	return reply(200, map[string]any{"ready": true})
}

func (h *handler) complete(ctx context.Context, q http1.Query) answer {
	raw := q.Get("exit_code")
	if raw == "" {
		return fail(400, "exit_code is required")
	}
	code, err := strconv.Atoi(raw)
	if err != nil || peers.ValidCode(code) != nil {
		return fail(400, "exit_code %q: want an integer from 0 to 255", raw)
	}
	peer := q.Get("peer")
	if peer == "" {
		peer = DefaultPeer
	}
	c := Completion{Peer: peer, Code: code, Reason: q.Get("reason"), StopSignal: q.Get("stop_signal")}
	if at := q.Get("stopped_at"); at != "" {
		if c.StoppedAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return fail(400, "stopped_at %q: want an RFC 3339 time", at)
		}
	}
	if err := h.b.Complete(ctx, c); err != nil {
		status := 400
		var f interface{ Forbidden() bool }
		if errors.As(err, &f) && f.Forbidden() {
			status = 403
		}
		return fail(status, "%v", err)
	}
	return reply(202, map[string]any{"recorded": true, "peer": peer, "exit_code": code})
}

func (h *handler) drain(ctx context.Context, q http1.Query) answer {
	h.hooks.add(callerPID(ctx))
	if q.Has("wait") {
		wait, err := waitParam(q)
		if err != nil {
			return fail(400, "%v", err)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	ok, why := h.b.Drain(ctx)
	if !ok {
		return reply(504, map[string]any{"drained": false, "reason": why})
	}
	return reply(200, map[string]any{"drained": true, "reason": why})
}

func (h *handler) status(context.Context, http1.Query) answer {
	return reply(200, h.b.Status())
}

// DefaultPeer is the peer name when none is given.
const DefaultPeer = "app"

func waitParam(q http1.Query) (time.Duration, error) {
	raw := q.Get("wait")
	if raw == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("wait %q: want a duration such as 30s", raw)
	}
	return min(d, MaxWait), nil
}
