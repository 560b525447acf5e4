// Command sluice-load simulates a fleet of devices against a Sluice or ThingsBoard
// deployment and reports throughput, HDR latency percentiles and errors by status,
// with optional JSON and self-contained HTML reports (package loadtest/fleet).
//
//	sluice-load -url http://localhost:8080 -user tenant@thingsboard.org -password tenant \
//	    -devices 100 -rate 2000 -connections 64 -duration 60s -profile meter \
//	    -json run.json -html run.html -cleanup
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/sluice-iot/sluice/loadtest"
	"github.com/sluice-iot/sluice/loadtest/fleet"
	"github.com/sluice-iot/sluice/loadtest/report"
)

func main() {
	// Registered for the whole run: the first signal stops the load, the second
	// stops waiting for it, and one during the cleanup ends the cleanup.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	if err := run(os.Args[1:], os.Stdout, os.Stderr, sigs); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-load:", err)
		os.Exit(1)
	}
}

// flags are the command line beyond fleet.Options.
type flags struct {
	tokensFile, saveTokens, jsonFile, htmlFile string
	cleanup, quiet                             bool
}

func parse(args []string, stderr io.Writer) (fleet.Options, flags, error) {
	var o fleet.Options
	var f flags
	var profile string
	fs := flag.NewFlagSet("sluice-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice-load -url URL (-user U -password P | -api-key K | -provision-key K -provision-secret S | -tokens FILE) [flags]")
		fmt.Fprintln(stderr, "Simulates a fleet of devices against a Sluice or ThingsBoard deployment. Flags:")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.URL, "url", "http://localhost:8080", "target base URL (http:// or https://), with the path prefix of a deployment behind one (https://host/tb)")
	fs.BoolVar(&o.Insecure, "insecure", false, "skip TLS certificate verification (self-signed test deployments)")
	fs.IntVar(&o.Devices, "devices", 10, "devices to create or provision (with -tokens: use at most this many; 0 = all)")
	fs.StringVar(&o.User, "user", "", "log in as this tenant administrator to create devices over the REST API")
	fs.StringVar(&o.Password, "password", "", "password of -user")
	fs.StringVar(&o.APIKey, "api-key", "", "API key instead of -user/-password (X-Authorization: ApiKey ...)")
	fs.StringVar(&o.ProvisionKey, "provision-key", "", "provision the devices via /api/v1/provision with this device profile key")
	fs.StringVar(&o.ProvisionSecret, "provision-secret", "", "secret of -provision-key")
	fs.StringVar(&f.tokensFile, "tokens", "", "file of device access tokens, one per line: use these devices, create none")
	fs.StringVar(&f.saveTokens, "save-tokens", "", "write the tokens of the fleet's devices to this file (reuse with -tokens)")
	fs.BoolVar(&f.cleanup, "cleanup", false, "delete the devices this run created or provisioned at the end")
	fs.StringVar(&o.NamePrefix, "name-prefix", "sluice-load", "names of created devices start with this")
	fs.StringVar(&o.DeviceType, "device-type", "default", "type (profile name) of created devices")
	fs.IntVar(&o.SetupConcurrency, "setup-concurrency", 16, "devices created, provisioned or deleted at once")

	fs.StringVar(&profile, "profile", "single", "payload: "+profileNames())
	fs.IntVar(&o.BatchSize, "batch-size", 10, "timestamped points per request of -profile batch")
	fs.Float64Var(&o.Rate, "rate", 0, "requests per second over all connections, open loop; 0 = flat out (closed loop)")
	fs.IntVar(&o.Connections, "connections", 16, "concurrent connections")
	fs.DurationVar(&o.Duration, "duration", 30*time.Second, "measured run time (0 = only -requests bounds the run)")
	fs.Int64Var(&o.Requests, "requests", 0, "stop after this many requests (0 = only -duration bounds the run)")
	fs.DurationVar(&o.Warmup, "warmup", 0, "unrecorded warm-up before the measured run")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "timeout of each request")
	fs.IntVar(&o.AttributesEvery, "attributes-every", 0, "every device posts client attributes instead of telemetry every N of its requests (0 = never)")
	fs.IntVar(&o.RPCPollers, "rpc-poll", 0, "this many devices also long-poll GET /api/v1/{token}/rpc for server-side RPC and reply")
	fs.DurationVar(&o.RPCTimeout, "rpc-timeout", 30*time.Second, "timeout of each RPC long poll")
	fs.DurationVar(&o.Interval, "interval", time.Second, "resolution of the progress line and the report's timeline")
	fs.StringVar(&f.jsonFile, "json", "", "write the JSON report to this file")
	fs.StringVar(&f.htmlFile, "html", "", "write the self-contained HTML report (charts) to this file")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress line")
	if err := fs.Parse(args); err != nil {
		return o, f, err
	}
	if fs.NArg() > 0 {
		return o, f, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	p, err := loadtest.ParseProfile(profile)
	if err != nil {
		return o, f, err
	}
	o.Profile = p
	if f.tokensFile != "" {
		if o.Tokens, err = readTokens(f.tokensFile); err != nil {
			return o, f, err
		}
		if len(o.Tokens) == 0 {
			return o, f, fmt.Errorf("%s has no tokens", f.tokensFile)
		}
		if !isSet(fs, "devices") {
			o.Devices = 0
		}
	}
	if err := check(o, f); err != nil {
		return o, f, err
	}
	return o, f, nil
}

// check refuses flags that would fail only after the devices were made (and the
// fleet's setup is the slow, visible part of a run).
func check(o fleet.Options, f flags) error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"-duration", o.Duration}, {"-warmup", o.Warmup}, {"-timeout", o.Timeout}, {"-interval", o.Interval}, {"-rpc-timeout", o.RPCTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("%s %v: negative", d.name, d.v)
		}
	}
	for _, n := range []struct {
		name string
		v    int64
	}{{"-requests", o.Requests}, {"-devices", int64(o.Devices)}, {"-connections", int64(o.Connections)}, {"-batch-size", int64(o.BatchSize)},
		{"-attributes-every", int64(o.AttributesEvery)}, {"-rpc-poll", int64(o.RPCPollers)}, {"-setup-concurrency", int64(o.SetupConcurrency)}} {
		if n.v < 0 {
			return fmt.Errorf("%s %d: negative", n.name, n.v)
		}
	}
	// A NaN rate would pass every comparison and end as a JSON report that cannot
	// be written; an infinite one makes every request due at once.
	if math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) || o.Rate < 0 {
		return fmt.Errorf("-rate %v: want requests per second, 0 or more (0 = flat out)", o.Rate)
	}
	if o.Duration == 0 && o.Requests == 0 {
		return errors.New("-duration 0 needs -requests")
	}
	// Provisioned devices are found by name to delete them: that takes a login.
	if f.cleanup && len(o.Tokens) == 0 && o.ProvisionKey != "" && o.User == "" && o.APIKey == "" {
		return errors.New("-cleanup of provisioned devices needs a login to delete them: give -user and -password, or -api-key")
	}
	return nil
}

// run is the command; sigs delivers the interrupts (SIGINT, SIGTERM). The first
// ends the setup or the load, the second the wait for requests in flight and the
// RPC pollers' first polls, so the report comes at once; cleanup ends at the
// next one after it began.
func run(args []string, stdout, stderr io.Writer, sigs <-chan os.Signal) error {
	o, f, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	live := !f.quiet && isTerminal(stderr)
	stderr = &syncWriter{w: stderr} // the progress line and the signal watcher write from goroutines

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	abort := make(chan struct{})
	o.Abort = abort
	endWatch := watch(sigs, stop, abort, stderr, live)
	defer endWatch()

	o.OnSample = progress(stderr, o, f.quiet, live)
	var setupBar *progressbar.ProgressBar
	if live && len(o.Tokens) == 0 {
		setupBar = newBar(stderr, int64(o.Devices), "setting up devices")
		o.OnSetup = func(done, _ int) { setupBar.Set(done) }
	}
	fl, err := fleet.New(ctx, o)
	if setupBar != nil {
		setupBar.Finish()
		fmt.Fprintln(stderr)
	}
	if err != nil {
		endWatch()
		if fl != nil && f.cleanup {
			err = errors.Join(err, cleanup(fl, stderr))
		}
		return err
	}
	fmt.Fprintf(stderr, "sluice-load: %d devices (%s) in %v\n", len(fl.Devices), fl.Mode, fl.SetupTime.Round(time.Millisecond))
	if f.saveTokens != "" {
		if err := writeFile(f.saveTokens, func(w io.Writer) error { return fleet.WriteTokens(w, fl.Devices) }); err != nil {
			endWatch()
			return errors.Join(err, maybeCleanup(f.cleanup, fl, stderr))
		}
	}

	rep, err := fl.Run(ctx)
	endWatch() // a signal from now on is cleanup's
	if live {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		return errors.Join(err, maybeCleanup(f.cleanup, fl, stderr))
	}
	rep.WriteText(stdout)
	var errs []error
	if f.jsonFile != "" {
		errs = append(errs, writeFile(f.jsonFile, rep.WriteJSON))
	}
	if f.htmlFile != "" {
		errs = append(errs, writeFile(f.htmlFile, rep.WriteHTML))
	}
	errs = append(errs, maybeCleanup(f.cleanup, fl, stderr))
	return errors.Join(errs...)
}

// watch calls stop at the first signal of sigs and closes abort at the second,
// until end is called. live: stderr has a progress bar to end the line of.
func watch(sigs <-chan os.Signal, stop func(), abort chan<- struct{}, stderr io.Writer, live bool) (end func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-sigs:
		case <-done:
			return
		}
		stop()
		if live {
			fmt.Fprintln(stderr)
		}
		fmt.Fprintln(stderr, "sluice-load: stopping (Ctrl-C again to stop waiting for requests in flight)")
		select {
		case <-sigs:
		case <-done:
			return
		}
		close(abort)
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-exited }) }
}

// progress returns the OnSample that shows the run: a progress bar with the rate,
// failures and p99 on a terminal, a plain line per interval otherwise.
func progress(w io.Writer, o fleet.Options, quiet, live bool) func(loadtest.Sample) {
	if quiet {
		return nil
	}
	// p99 is of the 2xx answers; "–" when there were none (not 0 ms).
	p99 := func(d time.Duration, n int64) string {
		if n == 0 {
			return "–"
		}
		return report.Millis(ms(d))
	}
	line := func(s loadtest.Sample) string {
		all := s.TotalRequests + s.TotalErrors
		return fmt.Sprintf("%s req/s, %s requests, %s failed, 2xx p99 %s (so far %s)",
			report.Thousands(s.ReqPerSec()), report.Thousands(float64(all)),
			report.Thousands(float64(s.TotalFailed)), p99(s.P99, s.Latencies), p99(s.TotalP99, all-s.TotalFailed))
	}
	if !live {
		return func(s loadtest.Sample) { fmt.Fprintf(w, "%6.1fs  %s\n", s.At.Seconds(), line(s)) }
	}
	total := o.Requests
	if o.Duration > 0 {
		total = int64(o.Duration / time.Second)
	}
	var bar *progressbar.ProgressBar // made at the first sample, after the setup's bar
	return func(s loadtest.Sample) {
		if bar == nil {
			bar = newBar(w, total, "")
		}
		bar.Describe(line(s))
		if o.Duration > 0 {
			bar.Set64(int64(s.At / time.Second))
		} else {
			bar.Set64(s.TotalRequests)
		}
	}
}

func newBar(w io.Writer, total int64, desc string) *progressbar.ProgressBar {
	return progressbar.NewOptions64(max(total, 1),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(20),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionSetRenderBlankState(true),
	)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func maybeCleanup(do bool, fl *fleet.Fleet, stderr io.Writer) error {
	if !do {
		return nil
	}
	return cleanup(fl, stderr)
}

// cleanup deletes the fleet's devices, even after Ctrl-C ended the run; a
// Ctrl-C during the cleanup ends it.
func cleanup(fl *fleet.Fleet, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Only signals from now on: those that ended the run came before. (Signals
	// are delivered to this channel as well as to run's.)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stderr, "sluice-load: deleting %d devices (Ctrl-C again to leave them)\n", len(fl.Devices))
	return fl.Cleanup(ctx)
}

func readTokens(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return fleet.ReadTokens(f)
}

// writeFile writes path with fn; tokens files and reports are for the user only.
func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	return f.Close()
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func profileNames() string {
	names := make([]string, len(loadtest.Profiles))
	for i, p := range loadtest.Profiles {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}
