// Command fake-envoy stands in for the envoy binary in proxy-supervisor's end-to-end
// tests and demo. It serves fakeenvoy's admin API and listeners, and treats
// its parent the way Envoy does: which signals kill it and when, its exit codes, and on
// request a crash, a hang on shutdown or a burst of orphaned processes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proxy-supervisor/proxy-supervisor/e2e/fakeenvoy"
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
	os.Exit(run(withEnvFlags(os.Args[1:], os.Getenv(envFlags)), os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	// Before anything else: until Envoy is initialised these signals kill it,
	// and the ones Go's runtime would ignore or answer with a goroutine dump
	// kill it the kernel's way.
	if err := restoreDefaultActions(defaultAction...); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	// Envoy's crash handlers are installed at once: a fatal signal, from a
	// fault or from kill, is logged with a backtrace and re-raised.
	fatal := make(chan os.Signal, 1)
	signal.Notify(fatal, fatalSignals...)
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, errNoServing) {
		return 0
	}
	if err != nil {
		return 1 // Envoy exits 1 on a bad command line
	}
	level, _ := logLevel(cfg.logLevel)
	log := slog.New(fakeenvoy.NewLogHandler(stderr, level))
	critical := func(msg string) { log.Log(context.Background(), fakeenvoy.LevelCritical, msg) }

	// The crash can come from another goroutine (a signal) at any time.
	var cleanups cleanupList
	defer cleanups.run()
	crash := func(sig syscall.Signal) {
		critical(fmt.Sprintf("Caught %s, suspect faulting address 0x0", signalDescription(sig)))
		critical("Backtrace (use tools/stack_decode.py to get line numbers):")
		critical("Envoy version: " + cfg.version.Build())
		critical("#0: [0x5579f8e1c2a4]")
		cleanups.run()
		die(sig)
	}
	go func() { crash((<-fatal).(syscall.Signal)) }()

	sigs := make(chan os.Signal, 8)
	if cfg.hangOnTerm {
		signal.Notify(sigs, unix.SIGTERM, unix.SIGINT)
	}
	log.Info("initializing epoch 0 (base id=0, hot restart version=" + fakeenvoy.HotRestartVersion() + ")")
	if cfg.configError {
		critical(fmt.Sprintf("error initializing configuration '%s': Unable to parse JSON as proto (INVALID_ARGUMENT: invalid JSON)", cfg.configPath))
		return 1
	}
	boot, err := cfg.bootstrap()
	if err != nil {
		critical(fmt.Sprintf("error initializing configuration '%s': %v", cfg.configPath, err))
		return 1
	}
	switch cfg.mode {
	case "validate":
		fmt.Fprintf(stderr, "configuration '%s' OK\n", cfg.configPath)
		return 0
	case "init_only":
		return 0
	}
	if cfg.orphans > 0 {
		if err := spawnOrphans(cfg.orphans, cfg.orphanLife); err != nil {
			critical(err.Error())
			return 1
		}
	}

	opts := cfg.options(log, boot)
	opts.OnInit = func() { signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGUSR1, unix.SIGHUP) }
	if cfg.crashAnswer > 0 {
		opts.OnAnswered = func(n int64) {
			if uint64(n) == cfg.crashAnswer {
				crash(unix.SIGSEGV)
			}
		}
	}
	// The control socket is bound before the admin port can answer: a test
	// that saw the proxy ready may drive the fixture at once.
	var ctl net.Listener
	if cfg.control != "" {
		if ctl, err = listenControl(cfg.control); err != nil {
			critical(err.Error())
			return 1
		}
		cleanups.add(func() { ctl.Close() })
	}
	e, err := fakeenvoy.Start(opts)
	if err != nil {
		critical(err.Error())
		return 1
	}
	exit := func(code int) {
		cleanups.run()
		log.Info("exiting")
		os.Exit(code)
	}
	if ctl != nil {
		serveControl(ctl, fixture{envoy: e, crash: func() { crash(unix.SIGSEGV) }, exit: exit})
	}
	// The address file comes before the ready file, and whole: a reader that
	// waits for the ready file then reads the address must find it.
	go func() {
		if cfg.adminAddressPath != "" {
			<-e.Bound()
			if err := writeWhole(cfg.adminAddressPath, []byte(e.AdminAddr())); err != nil {
				critical(fmt.Sprintf("cannot open admin address output file %s for writing.", cfg.adminAddressPath))
			}
		}
		if cfg.readyFile != "" {
			<-e.Initialized()
			if err := os.WriteFile(cfg.readyFile, nil, 0o644); err != nil {
				log.Error(fmt.Sprintf("ready file: %v", err))
			}
		}
	}()

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
			crash(unix.SIGSEGV)
		case <-exitAt:
			exit(cfg.exitCode)
		}
	}
}

// writeWhole writes a file that readers never see half written.
func writeWhole(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// cleanupList is what must be undone however the process ends. Each cleanup
// runs once.
type cleanupList struct {
	mu  sync.Mutex
	fns []func()
}

func (l *cleanupList) add(fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fns = append(l.fns, fn)
}

func (l *cleanupList) run() {
	l.mu.Lock()
	fns := l.fns
	l.fns = nil
	l.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// after is time.After for a knob that may be off.
func after(d time.Duration) <-chan time.Time {
	if d <= 0 {
		return nil
	}
	return time.After(d)
}
