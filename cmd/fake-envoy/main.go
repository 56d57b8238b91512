// Command fake-envoy stands in for the envoy binary in proxy-supervisor's end-to-end
// tests and demo. It serves internal/fakeenvoy's admin API and listeners, and treats
// its parent the way Envoy does: which signals kill it and when, its exit codes, and on
// request a crash, a hang on shutdown or a burst of orphaned processes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/internal/fakeenvoy"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case orphanParentMode:
			os.Exit(orphanParent(os.Args[2:]))
		case orphanMode:
			os.Exit(orphan(os.Args[2:]))
		}
	}
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	// Before anything else: until Envoy is initialised these signals kill it.
	if err := restoreDefaultActions(unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGUSR1, unix.SIGUSR2); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 1 // Envoy exits 1 on a bad command line
	}
	level, _ := logLevel(cfg.logLevel)
	log := slog.New(fakeenvoy.NewLogHandler(stderr, level))
	critical := func(msg string) { log.Log(context.Background(), fakeenvoy.LevelCritical, msg) }

	sigs := make(chan os.Signal, 8)
	if cfg.hangOnTerm {
		signal.Notify(sigs, unix.SIGTERM, unix.SIGINT)
	}
	log.Info("initializing epoch 0 (base id=0, hot restart version=11.104)")
	if cfg.configError {
		critical(fmt.Sprintf("error initializing configuration '%s': Unable to parse JSON as proto (INVALID_ARGUMENT: invalid JSON)", cfg.configPath))
		return 1
	}
	if cfg.orphans > 0 {
		if err := spawnOrphans(cfg.orphans, cfg.orphanLife); err != nil {
			critical(err.Error())
			return 1
		}
	}

	opts := cfg.options(log)
	opts.OnInit = func() { signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGUSR1, unix.SIGHUP) }
	e, err := fakeenvoy.Start(opts)
	if err != nil {
		critical(err.Error())
		return 1
	}
	var cleanups []func()
	defer func() {
		for _, c := range cleanups {
			c()
		}
	}()
	exit := func(code int) {
		for _, c := range cleanups {
			c()
		}
		log.Info("exiting")
		os.Exit(code)
	}
	crash := func() {
		critical("Caught Segmentation fault, suspect faulting address 0x0")
		critical("Backtrace (use tools/stack_decode.py to get line numbers):")
		critical("Envoy version: " + fakeenvoy.Version())
		for _, c := range cleanups {
			c()
		}
		die(unix.SIGSEGV)
	}
	// The control socket's crash and exit run here, on the main goroutine,
	// as the knobs' do: the cleanups are not theirs to read concurrently.
	acts := make(chan func())
	if cfg.control != "" {
		ctl, err := serveControl(cfg.control, fixture{envoy: e,
			crash: func() { acts <- crash },
			exit:  func(code int) { acts <- func() { exit(code) } }})
		if err != nil {
			critical(err.Error())
			return 1
		}
		cleanups = append(cleanups, func() { ctl.Close() })
	}
	if cfg.adminAddressPath != "" {
		go func() {
			<-e.Bound()
			if err := os.WriteFile(cfg.adminAddressPath, []byte(e.AdminAddr()), 0o644); err != nil {
				critical(fmt.Sprintf("cannot open admin address output file %s for writing.", cfg.adminAddressPath))
			}
		}()
	}
	if cfg.readyFile != "" {
		go func() {
			<-e.Initialized()
			if err := os.WriteFile(cfg.readyFile, nil, 0o644); err != nil {
				log.Error(fmt.Sprintf("ready file: %v", err))
			}
		}()
	}

	quit := e.Quit()
	crashAt, exitAt := after(cfg.crashAfter), after(cfg.exitAfter)
	for {
		select {
		case sig := <-sigs:
			switch sig {
			case unix.SIGTERM, unix.SIGINT:
				if sig == unix.SIGTERM {
					log.Warn("caught ENVOY_SIGTERM")
				} else {
					log.Warn("caught SIGINT")
				}
				if cfg.hangOnTerm {
					log.Info("shutting down server instance")
					continue
				}
				e.Close()
				log.Info("exiting")
				return 0
			case unix.SIGUSR1:
				log.Info("caught SIGUSR1. Reopening access logs.")
				e.ReopenLogs()
			case unix.SIGHUP:
				log.Warn("caught and eating SIGHUP. See documentation for how to hot restart.")
			}
		case <-quit:
			quit = nil
			if cfg.hangOnTerm {
				continue
			}
			<-e.Done()
			log.Info("exiting")
			return 0
		case <-e.Fatal():
			return 1 // already logged
		case <-crashAt:
			crash()
		case <-exitAt:
			exit(cfg.exitCode)
		case act := <-acts:
			act()
		}
	}
}

// after is time.After for a knob that may be off.
func after(d time.Duration) <-chan time.Time {
	if d <= 0 {
		return nil
	}
	return time.After(d)
}
