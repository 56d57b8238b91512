// Command podapp is the app container of the real-kubelet suite's pods: the
// few things a Job or a web app does, in a static binary (busybox's wget
// crashes in a container on this kind of node). Steps run in order, and the
// first that ends the program gives its code:
//
//	get URL            one HTTP GET, which must answer 200 (exit 7 otherwise)
//	watch PATH         remember the file at PATH (exit 2 if there is none)
//	until-replaced     wait until the watched file is removed or replaced by
//	                   another, for up to a minute (exit 8 otherwise): a
//	                   supervisor's socket goes when it exits
//	fail-once FILE N   exit N unless FILE exists, creating it first
//	exit N             exit N
//	sleep D            sleep for the duration D
//	serve ADDR         serve HTTP on ADDR until SIGTERM, then stop accepting,
//	                   finish the requests in flight and go on; a request's
//	                   ?delay=D is answered after D, as a request that works
//	listen ADDR        hold a listener on ADDR and ignore SIGTERM, forever
//	exec ARGV...       replace podapp with ARGV (the rest of the command
//	                   line): a hook that waits before it runs its command
package main

import (
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
var arity = map[string]int{"get": 1, "watch": 1, "until-replaced": 0, "fail-once": 2, "exit": 1, "sleep": 1, "serve": 1, "listen": 1}

func run(args []string) int {
	for len(args) > 0 {
		if args[0] == "exec" {
			if len(args) < 2 {
				fmt.Fprintln(os.Stderr, "podapp: exec: no command")
				return 2
			}
			err := syscall.Exec(args[1], args[1:], os.Environ())
			fmt.Fprintf(os.Stderr, "podapp: exec %s: %v\n", args[1], err)
			return 127
		}
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
	case "watch":
		fi, err := os.Stat(arg[0])
		if err != nil {
			return 2, err
		}
		watched, watchedPath = fi, arg[0]
		return -1, nil
	case "until-replaced":
		return untilReplaced()
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

// watched is the file the watch step saw at watchedPath.
var (
	watched     os.FileInfo
	watchedPath string
)

func untilReplaced() (int, error) {
	if watched == nil {
		return 2, errors.New("no watch step before it")
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		// A file system may give a new file the inode number of one just
		// removed: its times tell them apart.
		if fi, err := os.Stat(watchedPath); err != nil || !os.SameFile(fi, watched) || !fi.ModTime().Equal(watched.ModTime()) {
			fmt.Printf("podapp: %s was replaced or removed\n", watchedPath)
			return -1, nil
		}
	}
	return 8, fmt.Errorf("%s was still the same file after a minute", watchedPath)
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
