// Command sluice-load simulates a fleet of devices against a Sluice or ThingsBoard
// deployment and reports throughput, HDR latency percentiles and errors by status,
// with optional JSON and self-contained HTML reports (package loadtest/fleet).
//
//	sluice-load -url http://localhost:8080 -user tenant@thingsboard.org -password tenant \
//	    -devices 100 -rate 2000 -connections 64 -duration 60s -profile meter \
//	    -json run.json -html run.html -cleanup
//
// Exit status: 0 after a run with at least one 2xx answer, 2 when no request was
// answered 2xx (the reports are still written), 1 on any other error.
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
	"path/filepath"
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
		os.Exit(exitCode(err))
	}
}

// errNoSuccess ends a run that went through (its report is written) but in
// which no request was answered 2xx: exit status 2, so that a script does not
// take a dead target for a passed load test.
var errNoSuccess = errors.New("no request was answered 2xx (exit status 2)")

// exitCode is the exit status for run's error: 2 for errNoSuccess, 1 for any
// other failure.
func exitCode(err error) int {
	if errors.Is(err, errNoSuccess) {
		return 2
	}
	return 1
}

// flags are the command line beyond fleet.Options.
type flags struct {
	tokensFile, saveTokens, jsonFile, htmlFile string
	cleanup, quiet                             bool
}

func parse(args []string, stderr io.Writer) (fleet.Options, flags, error) {
	var o fleet.Options
	var f flags
	var profile, encoding string
	fs := flag.NewFlagSet("sluice-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice-load -url URL (-user U -password P | -api-key K | -provision-key K -provision-secret S | -tokens FILE) [flags]")
		fmt.Fprintln(stderr, "Simulates a fleet of devices against a Sluice or ThingsBoard deployment.")
		fmt.Fprintln(stderr, "Exit status: 0 when the run went through with at least one 2xx answer; 2 when no request was")
		fmt.Fprintln(stderr, "answered 2xx (the report is still written); 1 on any other error. Flags:")
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
	fs.StringVar(&f.saveTokens, "save-tokens", "", "write the tokens of the fleet's devices to this file (reuse with -tokens); also those made before a failed or interrupted setup; "+
		"with -cleanup it is written again after the cleanup, without the devices deleted. Written to a temporary file renamed over it: an existing file is kept until then")
	fs.BoolVar(&f.cleanup, "cleanup", false, "delete the devices this run created or provisioned at the end")
	fs.StringVar(&o.NamePrefix, "name-prefix", "sluice-load", "names of created devices start with this")
	fs.StringVar(&o.DeviceType, "device-type", "default", "type (profile name) of created devices")
	fs.IntVar(&o.SetupConcurrency, "setup-concurrency", 16, "devices created, provisioned or deleted at once (a 429 or 503 is tried again, after its Retry-After)")

	fs.StringVar(&profile, "profile", "single", "payload: "+profileNames())
	fs.IntVar(&o.BatchSize, "batch-size", 10, "timestamped points per request of -profile batch")
	fs.Float64Var(&o.Rate, "rate", 0, "requests per second over all connections, open loop, at most 10,000,000; 0 = flat out (closed loop). "+
		"A connection answered 429 or 503 waits for the Retry-After (at most 10s; 100ms without one) before its next request, "+
		"and flat out one whose request got no answer waits 100ms; with -rate the schedule goes on meanwhile: "+
		"the requests that come due are sent by the other connections, or late (counted from their due time), or count as missed")
	fs.IntVar(&o.Connections, "connections", 16, "concurrent connections")
	fs.DurationVar(&o.Duration, "duration", 30*time.Second, "measured run time (0 = only -requests bounds the run)")
	fs.Int64Var(&o.Requests, "requests", 0, "stop after this many requests (0 = only -duration bounds the run)")
	fs.DurationVar(&o.Warmup, "warmup", 0, "unrecorded warm-up before the measured run")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "timeout of each request")
	fs.IntVar(&o.AttributesEvery, "attributes-every", 0, "every device posts client attributes instead of telemetry every N of its requests (0 = never)")
	fs.IntVar(&o.RPCPollers, "rpc-poll", 0, "this many devices also long-poll GET /api/v1/{token}/rpc for server-side RPC and reply")
	fs.DurationVar(&o.RPCTimeout, "rpc-timeout", fleet.DefaultRPCTimeout, "timeout of each RPC long poll; keep it under 30s against ThingsBoard, whose async request timeout answers 503 at 30 s")
	fs.StringVar(&encoding, "encoding", "none", "body encoding of telemetry and attribute posts: none, gzip or zstd (compressed, with Content-Encoding); Sluice accepts both, ThingsBoard does not decompress request bodies: use none against it")
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
	if encoding != "none" {
		if err := loadtest.CheckEncoding(encoding); err != nil {
			return o, f, fmt.Errorf("-encoding: %w (or none)", err)
		}
		o.Encoding = encoding
	}
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
// fleet's setup is the slow, visible part of a run), and 0 where 0 has no
// meaning of its own (fleet.Options would take it for its default).
func check(o fleet.Options, f flags) error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"-timeout", o.Timeout}, {"-interval", o.Interval}, {"-rpc-timeout", o.RPCTimeout}} {
		if d.v == 0 {
			return fmt.Errorf("%s 0: want a duration above 0", d.name)
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"-connections", o.Connections}, {"-batch-size", o.BatchSize}, {"-setup-concurrency", o.SetupConcurrency}} {
		if n.v == 0 {
			return fmt.Errorf("%s 0: want at least 1", n.name)
		}
	}
	if o.Devices == 0 && len(o.Tokens) == 0 {
		return errors.New("-devices 0: want at least 1 device to create or provision (0 means all of them only with -tokens)")
	}
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
	// Far above anything one generator sends; a typo (1e300) would otherwise
	// make the schedule's arithmetic overflow.
	if o.Rate > loadtest.MaxRate {
		return fmt.Errorf("-rate %g: want at most %s requests per second", o.Rate, report.Thousands(loadtest.MaxRate))
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
	// The output paths are checked now: one that cannot be written fails
	// before the devices are made and the load is sent, not after. The files
	// themselves are written at the end (an existing one is left as it was
	// when the run fails first).
	outs, err := openOutputs(f)
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
	o.OnFirstPollsWait = func(pending int, left time.Duration) {
		// After the first Ctrl-C the next one skips the wait; after a run that
		// ended by itself, the first only stops the (ended) load.
		again := "again"
		if ctx.Err() == nil {
			again = "twice"
		}
		if live {
			fmt.Fprintln(stderr)
		}
		fmt.Fprintf(stderr, "sluice-load: waiting up to %ds for the RPC pollers' first polls (Ctrl-C %s to skip)\n",
			max(int64(math.Ceil(left.Seconds())), 1), again)
	}
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
		if ctx.Err() != nil {
			err = fmt.Errorf("setup interrupted: %w", err)
		}
		if fl == nil {
			return err
		}
		// The devices made so far stay unless cleaned up: keep their tokens.
		// None made (the first create refused, a tenant's device limit): an
		// existing file stays as it was, it may list an earlier run's devices.
		var werr error
		if len(fl.Devices) > 0 {
			werr = outs.tokens.write(func(w io.Writer) error { return fleet.WriteTokens(w, fl.Devices) })
		}
		return errors.Join(err, werr, finish(f, fl, outs, stderr))
	}
	fmt.Fprintf(stderr, "sluice-load: %d devices (%s) in %v\n", len(fl.Devices), fl.Mode, fl.SetupTime.Round(time.Millisecond))
	if err := outs.tokens.write(func(w io.Writer) error { return fleet.WriteTokens(w, fl.Devices) }); err != nil {
		endWatch()
		return errors.Join(err, finish(f, fl, outs, stderr))
	}

	rep, err := fl.Run(ctx)
	endWatch() // a signal from now on is cleanup's
	if live {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		return errors.Join(err, finish(f, fl, outs, stderr))
	}
	rep.WriteText(stdout)
	errs := []error{outs.json.write(rep.WriteJSON), outs.html.write(rep.WriteHTML), finish(f, fl, outs, stderr)}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if rep.Summary.OK == 0 {
		return errNoSuccess
	}
	return nil
}

// finish deletes the fleet's devices with -cleanup; without, it says which
// devices the run leaves on the target, if it made any. After a cleanup that
// deleted devices, -save-tokens is written again with only those left (none:
// a comment line), so that it never lists the tokens of deleted devices.
func finish(f flags, fl *fleet.Fleet, outs *outputs, stderr io.Writer) error {
	if f.cleanup {
		err := cleanup(fl, stderr)
		if err != nil && fl.Made() {
			err = fmt.Errorf("%w; devices named %s may be left: delete them", err, fl.Names)
		}
		if left := fl.Remaining(); len(left) < len(fl.Devices) {
			werr := outs.tokens.write(func(w io.Writer) error {
				if len(left) == 0 {
					_, err := fmt.Fprintf(w, "# sluice-load: the %d devices of this run were deleted (-cleanup)\n", len(fl.Devices))
					return err
				}
				return fleet.WriteTokens(w, left)
			})
			err = errors.Join(err, werr)
		}
		return err
	}
	if !fl.Made() || len(fl.Devices)+fl.Unsure() == 0 {
		return nil
	}
	var more, saved string
	if n := fl.Unsure(); n > 0 {
		more = fmt.Sprintf(" (and up to %d more whose setup got no clear answer)", n)
	}
	if f.saveTokens != "" && len(fl.Devices) > 0 { // none made: the file was not written
		saved = ", their tokens in " + f.saveTokens
	}
	fmt.Fprintf(stderr, "sluice-load: left %d devices named %s%s on the target%s; delete them when done (-cleanup deletes a run's devices at its end)\n",
		len(fl.Devices), fl.Names, more, saved)
	return nil
}

// output is a file the run writes at its end. Nothing is written to path
// before then: each write goes to a new file in the same directory, renamed over
// path once complete, so an existing file (a tokens file may be the only record
// of devices still on the target) stays as it was until the run has its
// replacement, and is never left empty or half written.
type output struct {
	path string // "": not asked for; a symbolic link is followed (the file it names is replaced)
	mode os.FileMode
}

// outputs are the files of -save-tokens, -json and -html.
type outputs struct{ tokens, json, html *output }

// openOutputs checks that the files f names can be written, or fails before
// anything else happened: it creates and removes a file in each one's
// directory, and leaves the files themselves as they are.
func openOutputs(f flags) (*outputs, error) {
	outs := &outputs{}
	for _, o := range []struct {
		path string
		to   **output
	}{{f.saveTokens, &outs.tokens}, {f.jsonFile, &outs.json}, {f.htmlFile, &outs.html}} {
		out, err := checkOutput(o.path)
		if err != nil {
			return nil, fmt.Errorf("cannot write %s: %w", o.path, err)
		}
		*o.to = out
	}
	return outs, nil
}

// checkOutput checks that path can be written by a rename in its directory.
func checkOutput(path string) (*output, error) {
	out := &output{path: path, mode: 0o600} // tokens files and reports are for the user only
	if path == "" {
		return out, nil
	}
	out.path = linkTarget(path) // a link to the file: replace the file, not the link
	st, err := os.Stat(out.path)
	switch {
	case err == nil && !st.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case err == nil:
		out.mode = st.Mode().Perm() // a file replaced keeps its permissions
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out.path), "."+filepath.Base(out.path)+".*.tmp")
	if err != nil {
		return nil, err
	}
	tmp.Close()
	os.Remove(tmp.Name())
	return out, nil
}

// linkTarget is the file path names, symbolic links followed, also to a file
// not made yet (latest.json → runs/42.json): EvalSymlinks refuses such a link,
// and the rename at the end would then replace the link itself with the report.
func linkTarget(path string) string {
	for range 40 { // a loop of links: the Stat after this refuses it at start-up
		if real, err := filepath.EvalSymlinks(path); err == nil {
			return real
		}
		st, err := os.Lstat(path)
		if err != nil || st.Mode()&os.ModeSymlink == 0 {
			return path
		}
		to, err := os.Readlink(path)
		if err != nil {
			return path
		}
		if !filepath.IsAbs(to) {
			to = filepath.Join(filepath.Dir(path), to)
		}
		path = to
	}
	return path
}

// write writes the file with fn: to a new file in its directory, then renamed
// over it. Nothing when it was not asked for. It may be written again (the
// tokens file is, after a cleanup).
func (o *output) write(fn func(io.Writer) error) error {
	if o.path == "" {
		return nil
	}
	if err := writeAtomic(o.path, o.mode, fn); err != nil {
		return fmt.Errorf("cannot write %s: %w", o.path, err)
	}
	return nil
}

// writeAtomic writes path with fn by way of a temporary file in its directory,
// renamed over it once written and synced; on an error path is as it was.
func writeAtomic(path string, mode os.FileMode, fn func(io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := fn(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	syncDir(filepath.Dir(path))
	return nil
}

// syncDir makes a rename in dir survive a power cut. Best effort: the file is
// whole either way (the old one or the new), and some systems (Windows) open
// no directory to sync.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
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
			report.Rate(s.ReqPerSec()), report.Thousands(float64(all)),
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
