package fakeenvoy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// LevelCritical is Envoy's level above error; a config error is logged at it.
const LevelCritical = slog.LevelError + 4

// loggerAttr names the Envoy logger ("main", "admin", "config") a record belongs to.
func loggerAttr(name string) slog.Attr { return slog.String("logger", name) }

// NewLogHandler writes records the way Envoy's default log format does:
//
//	[2026-05-02 18:08:27.123][4242][info][main] message
//
// The logger name comes from a "logger" attribute (default "main"); other attributes
// follow the message as key=value.
func NewLogHandler(w io.Writer, level slog.Leveler) slog.Handler {
	if level == nil {
		level = slog.LevelInfo
	}
	return &logHandler{mu: new(sync.Mutex), w: w, level: level, logger: "main", pid: os.Getpid()}
}

type logHandler struct {
	mu     *sync.Mutex
	w      io.Writer
	level  slog.Leveler
	logger string
	attrs  []slog.Attr
	pid    int
}

func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	name := h.logger
	var extra strings.Builder
	add := func(a slog.Attr) bool {
		if a.Key == "logger" {
			name = a.Value.String()
		} else if a.Key != "" {
			fmt.Fprintf(&extra, " %s=%v", a.Key, a.Value)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	line := fmt.Sprintf("[%s][%d][%s][%s] %s%s\n",
		t.Format("2006-01-02 15:04:05.000"), h.pid, levelName(r.Level), name, r.Message, extra.String())
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, line)
	return err
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(slices.Clip(h.attrs), attrs...)
	return &c
}

func (h *logHandler) WithGroup(string) slog.Handler { return h }

func levelName(l slog.Level) string {
	switch {
	case l >= LevelCritical:
		return "critical"
	case l >= slog.LevelError:
		return "error"
	case l >= slog.LevelWarn:
		return "warning"
	case l >= slog.LevelInfo:
		return "info"
	case l >= slog.LevelDebug:
		return "debug"
	}
	return "trace"
}

// logLevels are spdlog's level names, which /logging takes.
var logLevels = []string{"trace", "debug", "info", "warning", "error", "critical", "off"}

// loggerNames are a subset of Envoy's logger registry, in its (alphabetical) order.
var loggerNames = []string{
	"admin", "client", "config", "conn_handler", "connection", "dns", "file", "filter",
	"hc", "http", "http2", "init", "main", "misc", "pool", "router", "runtime", "stats",
	"upstream",
}

// handleLogging is POST /logging: no parameter lists the loggers; level=, paths= or
// <logger>= changes levels.
func (e *Envoy) handleLogging(w http.ResponseWriter, r *http.Request) {
	q := query(r)
	var b strings.Builder
	code := http.StatusOK
	if len(q) > 0 {
		if err := e.changeLogLevels(q); err != nil {
			code = http.StatusBadRequest
			fmt.Fprintf(&b, "error: %v\n\n", err)
			b.WriteString("usage: /logging?<name>=<level> (change single level)\n")
			b.WriteString("usage: /logging?paths=name1:level1,name2:level2,... (change multiple levels)\n")
			b.WriteString("usage: /logging?level=<level> (change all levels)\n")
			b.WriteString("levels: ")
			for _, l := range logLevels {
				b.WriteString(l + " ")
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("active loggers:\n")
	e.mu.Lock()
	for _, name := range loggerNames {
		fmt.Fprintf(&b, "  %s: %s\n", name, e.levelOf(name))
	}
	e.mu.Unlock()
	b.WriteString("\n")
	reply(w, code, "", b.String())
}

func (e *Envoy) levelOf(name string) string {
	if l, ok := e.levels[name]; ok {
		return l
	}
	return "info"
}

func (e *Envoy) changeLogLevels(q map[string][]string) error {
	if len(q) != 1 {
		return fmt.Errorf("invalid number of parameters")
	}
	changes := make(map[string]string)
	for key, values := range q {
		value := ""
		if len(values) > 0 {
			value = values[0]
		}
		switch key {
		case "level":
			if !slices.Contains(logLevels, value) {
				return fmt.Errorf("unknown logger level")
			}
			for _, name := range loggerNames {
				changes[name] = value
			}
		case "paths":
			for pair := range strings.SplitSeq(value, ",") {
				name, level, _ := strings.Cut(strings.TrimSpace(pair), ":")
				if name == "" || level == "" {
					return fmt.Errorf("empty logger name or empty logger level")
				}
				if !slices.Contains(logLevels, level) {
					return fmt.Errorf("unknown logger level")
				}
				changes[name] = level
			}
		default:
			if !slices.Contains(logLevels, value) {
				return fmt.Errorf("unknown logger level")
			}
			changes[key] = value
		}
	}
	for name := range changes {
		if !slices.Contains(loggerNames, name) {
			return fmt.Errorf("unknown logger name")
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for name, level := range changes {
		e.levels[name] = level
	}
	return nil
}
