package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/e2e/fakeenvoy"
)

// fixture is what the control socket drives.
type fixture struct {
	envoy *fakeenvoy.Envoy
	crash func()
	exit  func(code int)
}

// listenControl binds the control socket. main binds it before the fake
// starts, so that a test which saw the proxy ready (the admin port answers)
// finds the socket there: a connection made before serveControl waits in the
// listen backlog.
func listenControl(path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return ln, nil
}

// serveControl takes fixture commands on ln, one per line, answering "ok"
// (or "ok: …" with what the command found: busy's) or "error: …" to each, once the
// command is done (busy's at its spell's end). It lets a test move the fake at runtime.
func serveControl(ln net.Listener, f fixture) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
}

func (f fixture) serve(c net.Conn) {
	defer c.Close()
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		after, said, err := f.command(strings.Fields(sc.Text()))
		answer := "ok\n"
		switch {
		case err != nil:
			answer = "error: " + err.Error() + "\n"
		case said != "":
			answer = "ok: " + said + "\n"
		}
		c.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(c, answer)
		if after != nil {
			after() // the answer is out before the process goes
		}
	}
}

// command runs one line; an action that ends the process comes back as after,
// and what the command has to say beyond "ok" as said.
func (f fixture) command(words []string) (after func(), said string, err error) {
	if len(words) == 0 {
		return nil, "", errors.New("empty command")
	}
	arg := func() (string, error) {
		if len(words) != 2 {
			return "", fmt.Errorf("usage: %s ARG", words[0])
		}
		return words[1], nil
	}
	switch words[0] {
	case "state":
		name, err := arg()
		if err != nil {
			return nil, "", err
		}
		s, err := fakeenvoy.ParseState(name)
		if err != nil {
			return nil, "", err
		}
		f.envoy.SetState(s)
	case "silent":
		v, err := arg()
		if err != nil {
			return nil, "", err
		}
		switch v {
		case "on":
			f.envoy.SetSilent(true)
		case "off":
			f.envoy.SetSilent(false)
		default:
			return nil, "", fmt.Errorf("silent %q: want on or off", v)
		}
	case "slow":
		v, err := arg()
		if err != nil {
			return nil, "", err
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, "", fmt.Errorf("slow %q: want a duration such as 1200ms, 0 for none", v)
		}
		f.envoy.SetSlow(d)
	case "busy":
		v, err := arg()
		if err != nil {
			return nil, "", err
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, "", fmt.Errorf("busy %q: want a duration such as 2s", v)
		}
		return nil, fmt.Sprintf("held %d admin requests for %v", f.envoy.Busy(d), d), nil
	case "crash":
		return f.crash, "", nil
	case "exit":
		v, err := arg()
		if err != nil {
			return nil, "", err
		}
		code, err := strconv.Atoi(v)
		if err != nil || code < 0 || code > 255 {
			return nil, "", fmt.Errorf("exit %q: want a code from 0 to 255", v)
		}
		return func() { f.exit(code) }, "", nil
	default:
		return nil, "", fmt.Errorf("unknown command %q", words[0])
	}
	return nil, "", nil
}
