// Command podapp is the app container of the real-kubelet suite's pods: the
// few things a Job or a web app does, in a static binary (busybox's wget
// crashes in a container on this kind of node). Steps run in order, and the
// first that ends the program gives its code:
//
//	get URL            one HTTP GET, which must answer 200 (exit 7 otherwise)
//	get-until-closed URL
//	                   get, then wait for the server to close that
//	                   connection (its process gone), for up to a minute
//	                   (exit 8 otherwise)
//	fail-once FILE N   exit N unless FILE exists, creating it first
//	exit N             exit N
//	sleep D            sleep for the duration D
//	serve ADDR         serve HTTP on ADDR until SIGTERM, then stop accepting,
//	                   finish the requests in flight and go on; a request's
//	                   ?delay=D is answered after D, as a request that works
//	listen ADDR        hold a listener on ADDR and ignore SIGTERM, forever
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// arity is the number of arguments of each step.
var arity = map[string]int{"get": 1, "get-until-closed": 1, "fail-once": 2, "exit": 1, "sleep": 1, "serve": 1, "listen": 1}

func run(args []string) int {
	for len(args) > 0 {
		n, ok := arity[args[0]]
		if !ok || len(args) < 1+n {
			fmt.Fprintf(os.Stderr, "podapp: bad step %q\n", args)
			return 2
		}
		code, err := do(args[0], args[1:1+n])
		if err != nil {
			fmt.Fprintf(os.Stderr, "podapp: %s: %v\n", args[0], err)
		}
		if code >= 0 {
			return code
		}
		args = args[1+n:]
	}
	return 0
}

// do runs one step: -1 to go on, else the exit code.
func do(step string, arg []string) (int, error) {
	switch step {
	case "get":
		return get(arg[0])
	case "get-until-closed":
		return getUntilClosed(arg[0])
	case "fail-once":
		code, err := strconv.Atoi(arg[1])
		if err != nil {
			return 2, err
		}
		if _, err := os.Stat(arg[0]); err == nil {
			return -1, nil
		}
		if err := os.WriteFile(arg[0], nil, 0o644); err != nil {
			return 2, err
		}
		fmt.Fprintf(os.Stderr, "podapp: first run, failing with %d\n", code)
		return code, nil
	case "exit":
		code, err := strconv.Atoi(arg[0])
		if err != nil {
			return 2, err
		}
		return code, nil
	case "sleep":
		d, err := time.ParseDuration(arg[0])
		if err != nil {
			return 2, err
		}
		time.Sleep(d)
		return -1, nil
	case "serve":
		return serve(arg[0])
	default: // listen
		signal.Ignore(syscall.SIGTERM)
		l, err := net.Listen("tcp", arg[0])
		if err != nil {
			return 1, err
		}
		defer l.Close()
		for {
			time.Sleep(time.Hour)
		}
	}
}

func get(url string) (int, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 7, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		return 7, fmt.Errorf("%s: %s", url, resp.Status)
	}
	fmt.Printf("%s: %s", url, body)
	return -1, nil
}

// getUntilClosed is get on a connection of its own, kept open after the
// answer until the server closes it: a kept-alive connection closes when
// the server's process ends, which the app thus waits for.
func getUntilClosed(url string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 2, err
	}
	c, err := net.DialTimeout("tcp", req.URL.Host, 5*time.Second)
	if err != nil {
		return 7, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if err := req.Write(c); err != nil {
		return 7, err
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, req)
	if err != nil {
		return 7, err
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 7, fmt.Errorf("%s: %s %v", url, resp.Status, err)
	}
	fmt.Printf("%s: %s", url, body)
	c.SetDeadline(time.Now().Add(time.Minute)) //nolint:errcheck
	if _, err := r.ReadByte(); errors.Is(err, os.ErrDeadlineExceeded) {
		return 8, errors.New("the server kept the connection open for a minute")
	}
	fmt.Println("podapp: the server closed the connection")
	return -1, nil
}

func serve(addr string) (int, error) {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return 1, err
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if d, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil && d > 0 {
				time.Sleep(min(d, 10*time.Second))
			}
			io.WriteString(w, "hello from the app\n")
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case <-term:
	case err := <-done:
		return 1, err
	}
	fmt.Println("podapp: SIGTERM, closing", addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return 1, err
	}
	return -1, nil
}
