package fakeenvoy

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

const (
	contentTypeText = "text/plain; charset=UTF-8"
	contentTypeJSON = "application/json"
	contentTypeHTML = "text/html; charset=UTF-8"
)

// adminHandler is one entry of Envoy's admin handler table. The table drives both the
// routing and the listing that /help and every 404 print.
type adminHandler struct {
	path   string
	help   string
	post   bool // mutates server state, so POST only
	params []adminParam
	serve  http.HandlerFunc
}

type adminParam struct {
	id, help string
	choices  []string // an enum parameter
}

func (e *Envoy) adminHandlers() []adminHandler {
	ok := func(w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusOK, "", "OK\n") }
	hs := []adminHandler{
		{path: "/", help: "Admin home page", serve: e.handleHome},
		{path: "/certs", help: "print certs on machine", serve: func(w http.ResponseWriter, _ *http.Request) {
			reply(w, http.StatusOK, contentTypeJSON, "{\n \"certificates\": []\n}")
		}},
		{path: "/clusters", help: "upstream cluster status", serve: func(w http.ResponseWriter, r *http.Request) {
			if firstNonEmpty(query(r), "format") == "json" {
				reply(w, http.StatusOK, contentTypeJSON, "{}")
				return
			}
			reply(w, http.StatusOK, "", "")
		}},
		{path: "/config_dump", help: "dump current Envoy configs (experimental)", serve: func(w http.ResponseWriter, _ *http.Request) {
			reply(w, http.StatusOK, contentTypeJSON, "{\n \"configs\": []\n}")
		}},
		{path: "/healthcheck/fail", help: "cause the server to fail health checks", post: true,
			serve: func(w http.ResponseWriter, r *http.Request) { e.setHealthCheckFailed(true); ok(w, r) }},
		{path: "/healthcheck/ok", help: "cause the server to pass health checks", post: true,
			serve: func(w http.ResponseWriter, r *http.Request) { e.setHealthCheckFailed(false); ok(w, r) }},
		{path: "/help", help: "print out list of admin commands", serve: func(w http.ResponseWriter, _ *http.Request) {
			reply(w, http.StatusOK, "", e.helpText())
		}},
		{path: "/hot_restart_version", help: "print the hot restart compatibility version",
			serve: func(w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusOK, "", hotRestartVersion) }},
		{path: "/logging", help: "query/change logging levels", post: true, serve: e.handleLogging, params: []adminParam{
			{id: "paths", help: "Change multiple logging levels by setting to <logger_name1>:<desired_level1>,<logger_name2>:<desired_level2>."},
			{id: "level", help: "desired logging level", choices: append([]string{""}, logLevels...)},
		}},
		{path: "/memory", help: "print current allocation/heap usage", serve: handleMemory},
		{path: "/quitquitquit", help: "exit the server", post: true, serve: e.handleQuit},
		{path: "/reset_counters", help: "reset all counters to zero", post: true, serve: e.handleResetCounters},
		{path: "/drain_listeners", help: "drain listeners", post: true, serve: e.handleDrainListeners, params: []adminParam{
			{id: "graceful", help: "When draining listeners, enter a graceful drain period prior to closing listeners. This behaviour and duration is configurable via server options or CLI"},
			{id: "skip_exit", help: "When draining listeners, do not exit after the drain period. This must be used with graceful"},
			{id: "inboundonly", help: "Drains all inbound listeners. traffic_direction field in envoy_v3_api_msg_config.listener.v3.Listener is used to determine whether a listener is inbound or outbound."},
		}},
		{path: "/server_info", help: "print server version/status information", serve: e.handleServerInfo},
		{path: "/ready", help: "print server state, return 200 if LIVE, otherwise return 503", serve: e.handleReady},
		{path: "/stats", help: "print server stats", serve: e.handleStats, params: []adminParam{
			{id: "usedonly", help: "Only include stats that have been written by system since restart"},
			{id: "filter", help: "Regular expression (Google re2) for filtering stats"},
			{id: "format", help: "Format to use", choices: []string{"html", "active-html", "text", "json"}},
			{id: "type", help: "Stat types to include.", choices: statTypes},
			{id: "histogram_buckets", help: "Histogram bucket display mode", choices: []string{"cumulative", "disjoint", "detailed", "none"}},
		}},
		{path: "/stats/recentlookups", help: "Show recent stat-name lookups", serve: func(w http.ResponseWriter, _ *http.Request) {
			reply(w, http.StatusOK, "", "Lookup tracking is not enabled. Use /stats/recentlookups/enable to enable.\n\ntotal: 0\n")
		}},
		{path: "/stats/recentlookups/clear", help: "clear list of stat-name lookups and counter", post: true, serve: ok},
		{path: "/stats/recentlookups/disable", help: "disable recording of reset stat-name lookup names", post: true, serve: ok},
		{path: "/stats/recentlookups/enable", help: "enable recording of reset stat-name lookup names", post: true, serve: ok},
		{path: "/listeners", help: "print listener info", serve: e.handleListeners, params: []adminParam{
			{id: "format", help: "File format to use", choices: []string{"text", "json"}},
		}},
		{path: "/reopen_logs", help: "reopen access logs", post: true,
			serve: func(w http.ResponseWriter, r *http.Request) { e.ReopenLogs(); ok(w, r) }},
	}
	slices.SortFunc(hs, func(a, b adminHandler) int { return strings.Compare(a.path, b.path) })
	return hs
}

// helpText is Envoy's listing: handlers in path order, "(POST)" on the mutating ones,
// each parameter indented below its handler.
func (e *Envoy) helpText() string {
	var b strings.Builder
	b.WriteString("admin commands are:\n")
	for _, h := range e.admin {
		post := ""
		if h.post {
			post = " (POST)"
		}
		fmt.Fprintf(&b, "  %s%s: %s\n", h.path, post, h.help)
		for _, p := range h.params {
			fmt.Fprintf(&b, "      %s: %s", p.id, p.help)
			if p.choices != nil {
				fmt.Fprintf(&b, "; One of (%s)", strings.Join(p.choices, ", "))
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// route is Envoy's admin dispatch: the path up to '?' must equal a handler's path
// exactly; a mutating handler takes POST only.
func (e *Envoy) route(w http.ResponseWriter, r *http.Request) {
	if !e.waitAnswering(r) {
		// Never answered; drop the connection without writing anything.
		panic(http.ErrAbortHandler)
	}
	path := requestPath(r)
	for _, h := range e.admin {
		if h.path != path {
			continue
		}
		if h.post && r.Method != http.MethodPost {
			e.log.Error(fmt.Sprintf("admin path %q mutates state, method=%s rather than POST", h.path, r.Method),
				loggerAttr("admin"))
			reply(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("Method %s not allowed, POST required.", r.Method))
			return
		}
		e.stats.counter("http.admin.downstream_rq_total").add(1)
		h.serve(w, r)
		return
	}
	reply(w, http.StatusNotFound, "", "invalid path. "+e.helpText())
}

// requestPath is the request target up to '?', as Envoy's admin compares it: not
// decoded, not cleaned, so "/ready/" and "/ready%20" are unknown paths.
func requestPath(r *http.Request) string {
	p := r.RequestURI
	if !strings.HasPrefix(p, "/") {
		return r.URL.EscapedPath() // absolute form: Envoy's codec keeps only the path
	}
	p, _, _ = strings.Cut(p, "?")
	return p
}

func query(r *http.Request) url.Values {
	q, _ := url.ParseQuery(r.URL.RawQuery) // Envoy keeps what it can parse, too
	return q
}

// firstNonEmpty is Envoy's queryParam: a parameter given with an empty value counts as
// absent.
func firstNonEmpty(q url.Values, key string) string {
	if v, ok := q[key]; ok && len(v) > 0 {
		return v[0]
	}
	return ""
}

// reply writes an admin answer with Envoy's default headers. Envoy streams every admin
// answer, so the body goes out chunked rather than with a content-length.
func reply(w http.ResponseWriter, code int, contentType, body string) {
	if contentType == "" {
		contentType = contentTypeText
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-cache, max-age=0")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Server", "envoy")
	w.WriteHeader(code)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	io.WriteString(w, body)
}

// serveAdmin starts answering on the reserved admin port.
func (e *Envoy) serveAdmin() error {
	ln, err := e.adminSock.listen()
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(e.route),
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				e.adminCx.opened()
			case http.StateClosed, http.StateHijacked:
				e.adminCx.closed()
			}
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	e.mu.Lock()
	if e.shutting {
		e.mu.Unlock()
		ln.Close()
		return nil
	}
	e.adminSrv = srv
	e.mu.Unlock()
	e.log.Info("admin address: "+e.AdminAddr(), loggerAttr("main"))
	close(e.bound)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		srv.Serve(ln)
	}()
	return nil
}

// closeAdmin lets an answer being written (the /quitquitquit one) finish, then drops
// everything, since Envoy exits within milliseconds.
func closeAdmin(srv *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if srv.Shutdown(ctx) != nil {
		srv.Close()
	}
}

// waitAnswering holds an admin request while the admin loop does not run
// or a Busy spell holds the main thread (a GET /ready starts the one armed),
// and then for as long as SetSlow says the main thread is busy.
func (e *Envoy) waitAnswering(r *http.Request) bool {
	e.mu.Lock()
	if r.Method == http.MethodGet && requestPath(r) == "/ready" {
		e.beginBusy()
	}
	if e.busy != nil {
		e.busy.held++
	}
	ch, slow := e.answerCh, e.slow
	e.mu.Unlock()
	select {
	case <-ch:
	case <-r.Context().Done():
		return false
	case <-e.stop:
		return false
	}
	return e.sleep(r.Context(), slow)
}

// updateAnswering opens the gate when the admin loop runs and no fixture silenced it
// or keeps it busy; a new gate closes it again.
func (e *Envoy) updateAnswering() {
	e.mu.Lock()
	defer e.mu.Unlock()
	want := e.loopUp && !e.silent && e.busy == nil && !e.shutting
	select {
	case <-e.answerCh:
		if !want {
			e.answerCh = make(chan struct{})
		}
	default:
		if want {
			close(e.answerCh)
		}
	}
}

func (e *Envoy) handleHome(w http.ResponseWriter, _ *http.Request) {
	var b strings.Builder
	b.WriteString("<!DOCTYPE html>\n<html lang='en'>\n<head><title>Envoy Admin</title></head>\n<body>\n<table>\n")
	for _, h := range e.admin {
		if h.path == "/" {
			continue
		}
		fmt.Fprintf(&b, "<tr><td><a href='%s'>%s</a></td><td>%s</td></tr>\n", h.path[1:], h.path[1:], h.help)
	}
	b.WriteString("</table>\n</body>\n</html>\n")
	reply(w, http.StatusOK, contentTypeHTML, b.String())
}

func (e *Envoy) handleReady(w http.ResponseWriter, _ *http.Request) {
	st := e.State()
	code := http.StatusServiceUnavailable
	if st == Live {
		code = http.StatusOK
	}
	reply(w, code, "", st.String()+"\n")
}

func (e *Envoy) handleQuit(w http.ResponseWriter, _ *http.Request) {
	e.quitOnce.Do(func() { close(e.quit) })
	reply(w, http.StatusOK, "", "OK\n")
	if !e.opts.HangOnQuit {
		// closeAdmin lets this answer finish first.
		go e.shutdown()
	}
}

func (e *Envoy) setHealthCheckFailed(failed bool) {
	e.change(func() bool { e.hcFailed = failed; return true })
}
