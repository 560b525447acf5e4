// Command sluice runs a Sluice node: with no arguments it reads configs/sluice.yaml
// (when present) and the environment, and serves until SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/sluice-iot/sluice/config"
	"github.com/sluice-iot/sluice/internal/procs"
	"github.com/sluice-iot/sluice/node"
)

const defaultConfigPath = "configs/sluice.yaml"

func main() {
	path := flag.String("config", os.Getenv("SLUICE_CONFIG"), "configuration file (default "+defaultConfigPath+" when it exists)")
	flag.Parse()
	if flag.Arg(0) == "deadletter" {
		os.Exit(deadletter(*path, flag.Args()[1:], os.Environ(), os.Stdout, os.Stderr))
	}
	if err := run(*path); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	if path == "" {
		if _, err := os.Stat(defaultConfigPath); err == nil {
			path = defaultConfigPath
		}
	}
	cfg, err := config.Load(path, os.Environ())
	if err != nil {
		return fmt.Errorf("bad configuration:\n%w", err)
	}
	log := newLogger(cfg.Log)
	maxProcs, gcPercent := procs.Set()
	log.Info("scheduler", "gomaxprocs", maxProcs, "cpus", runtime.NumCPU(), "gogc", gcPercent)
	// SIGHUP too: a closed terminal (make run) stops the node gracefully
	// rather than killing it. Caught from before the start, so a signal sent
	// as soon as the node says it is ready (or during the start) is a
	// graceful stop, not the default death. A second signal exits at once;
	// what was acknowledged is durable already.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	n, err := node.Start(cfg, log)
	if err != nil {
		return err
	}
	// Printed, never logged: these are shown once to the person starting the node.
	b := n.Bootstrap
	if b.GeneratedPassword != "" {
		fmt.Fprintf(os.Stderr, "\nFirst start: system administrator sysadmin@thingsboard.org, password %s (shown once; change it)\n\n", b.GeneratedPassword)
	}
	if cfg.Data.Demo {
		fmt.Fprintf(os.Stderr, "\nDemo data loaded. Logins: sysadmin@thingsboard.org / sysadmin, tenant@thingsboard.org / tenant, customer@thingsboard.org / customer.\nDemo device access token: %s\n  curl -X POST -H 'Content-Type: application/json' -d '{\"temperature\":25}' http://localhost:%d/api/v1/%s/telemetry\n\n",
			b.DemoDeviceToken, port(n.Addr()), b.DemoDeviceToken)
	}

	select {
	case s := <-sig:
		log.Info("shutting down; a second signal exits at once", "signal", s.String())
	case err := <-n.Done():
		if err != nil {
			log.Error("listener stopped", "err", err)
		}
	}
	go func() {
		s := <-sig
		log.Warn("exiting without finishing the shutdown", "signal", s.String())
		os.Exit(1)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := withoutDeadline(n.Shutdown(ctx)); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped; every acknowledged write is stored")
	return nil
}

// withoutDeadline drops the part of a shutdown error that says requests
// outlasted the 30 s (they were cut), keeping any other (a store that did not
// close cleanly), which a single errors.Is would have hidden with it.
func withoutDeadline(err error) error {
	if errors.Is(err, context.DeadlineExceeded) && !isJoined(err) {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	var kept []error
	for _, e := range j.Unwrap() {
		if e = withoutDeadline(e); e != nil {
			kept = append(kept, e)
		}
	}
	return errors.Join(kept...)
}

func isJoined(err error) bool {
	_, ok := err.(interface{ Unwrap() []error })
	return ok
}

// port is the TCP port of addr (the real one when HTTP_BIND_PORT is 0).
func port(addr net.Addr) int {
	if a, ok := addr.(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

func newLogger(c config.Log) *slog.Logger {
	var level slog.Level
	level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
