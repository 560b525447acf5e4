// Package soak runs a Sluice node under steady load for a long time and checks
// that it holds still: the resident memory and goroutine count after warm-up do
// not grow, and no request fails. It drives the real binary with the fleet
// simulator (loadtest/fleet), first flat out to find the peak, then open loop at
// a fraction of it.
package soak

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-iot/sluice/loadtest"
	"github.com/sluice-iot/sluice/loadtest/fleet"
	"github.com/sluice-iot/sluice/loadtest/report"
)

// Options describe a soak run.
type Options struct {
	// Binary is the sluice binary; it is started on the embedded default with the
	// demo data in a fresh folder under DataDir (a temporary one when empty).
	Binary  string
	DataDir string
	// Duration is the soak at Rate; Warmup is its first part, left out of the
	// growth check (default Duration/6).
	Duration, Warmup time.Duration
	// Probe is the flat-out run that measures the peak (default 20 s); Rate is the
	// soak's requests/s, 0 meaning Fraction (default 0.5) of the probe's rate.
	Probe    time.Duration
	Rate     float64
	Fraction float64
	// The fleet: Devices devices (default 100) over Connections connections
	// (default 32) sending Profile (default single) payloads.
	Devices, Connections int
	Profile              loadtest.Profile
	// SampleEvery is how often RSS and goroutines are read (default 10 s).
	SampleEvery time.Duration
	// MaxGrowth is the allowed growth after warm-up (default 0.10 = 10%).
	MaxGrowth float64
	// Log gets progress lines; nil discards them.
	Log io.Writer
}

func (o *Options) normalize() error {
	if o.Binary == "" {
		return errors.New("soak: no binary")
	}
	if o.Duration <= 0 {
		return errors.New("soak: the duration must be positive")
	}
	if o.Warmup <= 0 {
		o.Warmup = o.Duration / 6
	}
	if o.Warmup >= o.Duration {
		return fmt.Errorf("soak: warm-up %v is not shorter than the run %v", o.Warmup, o.Duration)
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Devices, 100)
	def(&o.Connections, 32)
	if o.Probe <= 0 {
		o.Probe = 20 * time.Second
	}
	if o.Fraction <= 0 {
		o.Fraction = 0.5
	}
	if o.Profile == "" {
		o.Profile = loadtest.ProfileSingle
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 10 * time.Second
	}
	if o.MaxGrowth <= 0 {
		o.MaxGrowth = 0.10
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

// Sample is the node's state at one moment of the soak.
type Sample struct {
	Seconds    float64 `json:"seconds"` // since the soak began
	RSSBytes   int64   `json:"rssBytes"`
	Goroutines int64   `json:"goroutines"`
	HeapBytes  int64   `json:"heapBytes"`
}

// Result is the outcome of a soak.
type Result struct {
	StartedAt       time.Time      `json:"startedAt"`
	PeakRate        float64        `json:"peakRequestsPerSec"` // the probe's rate (0 when Rate was given)
	Rate            float64        `json:"rate"`
	Duration        float64        `json:"durationSeconds"`
	Warmup          float64        `json:"warmupSeconds"`
	MaxGrowth       float64        `json:"maxGrowth"`
	Samples         []Sample       `json:"samples"`
	Baseline        Sample         `json:"baseline"` // mean of the first samples after warm-up
	End             Sample         `json:"end"`      // mean of the last samples
	RSSGrowth       float64        `json:"rssGrowth"`
	GoroutineGrowth float64        `json:"goroutineGrowth"`
	Load            *report.Report `json:"load"`
	// Failures says why the soak failed; empty means it passed.
	Failures []string `json:"failures"`
}

// Passed reports whether the node held still and answered everything.
func (r *Result) Passed() bool { return len(r.Failures) == 0 }

// Run starts the node, measures the peak, soaks at the rate and checks growth.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	n, err := startNode(ctx, o.Binary, o.DataDir)
	if err != nil {
		return nil, err
	}
	defer n.stop()
	fmt.Fprintf(o.Log, "soak: node pid %d at %s\n", n.cmd.Process.Pid, n.url)

	base := fleet.Options{URL: n.url, User: "tenant@thingsboard.org", Password: "tenant", Devices: o.Devices,
		NamePrefix: "soak", Profile: o.Profile, Connections: o.Connections}
	fl, err := fleet.New(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("soak: cannot set up the fleet: %w", err)
	}
	tokens := make([]string, len(fl.Devices))
	for i, d := range fl.Devices {
		tokens[i] = d.Token
	}
	res := &Result{StartedAt: time.Now().UTC(), Rate: o.Rate, Duration: o.Duration.Seconds(),
		Warmup: o.Warmup.Seconds(), MaxGrowth: o.MaxGrowth}
	if res.Rate == 0 {
		probe := base
		probe.Tokens, probe.Duration, probe.Warmup = tokens, o.Probe, 2*time.Second
		r, err := runFleet(ctx, probe)
		if err != nil {
			return nil, err
		}
		res.PeakRate = r.Summary.RequestsPerSec
		res.Rate = res.PeakRate * o.Fraction
		fmt.Fprintf(o.Log, "soak: peak %.0f req/s (p99 %.1f ms, %d failed); soaking at %.0f req/s for %v\n",
			res.PeakRate, r.Latency.P99, r.Summary.Failed, res.Rate, o.Duration)
		if res.Rate < 1 {
			return nil, fmt.Errorf("soak: the probe measured %.1f req/s", res.PeakRate)
		}
	}

	soak := base
	soak.Tokens, soak.Rate, soak.Duration = tokens, res.Rate, o.Duration
	type outcome struct {
		r   *report.Report
		err error
	}
	done := make(chan outcome, 1)
	start := time.Now()
	go func() {
		r, err := runFleet(ctx, soak)
		done <- outcome{r, err}
	}()
	tick := time.NewTicker(o.SampleEvery)
	defer tick.Stop()
	var out outcome
wait:
	for {
		select {
		case out = <-done:
			break wait
		case <-tick.C:
			s, err := n.sample()
			if err != nil {
				res.Failures = append(res.Failures, fmt.Sprintf("cannot sample the node at %v: %v", time.Since(start).Round(time.Second), err))
				continue
			}
			s.Seconds = time.Since(start).Seconds()
			res.Samples = append(res.Samples, s)
			fmt.Fprintf(o.Log, "soak: %5.0fs  RSS %6.1f MiB  goroutines %5d  heap %6.1f MiB\n",
				s.Seconds, mib(s.RSSBytes), s.Goroutines, mib(s.HeapBytes))
		}
	}
	if out.err != nil {
		return nil, out.err
	}
	res.Load = out.r
	res.check()
	if err := n.alive(); err != nil {
		res.Failures = append(res.Failures, err.Error())
	}
	return res, nil
}

// samplesPerEnd is how many samples are averaged at each end of the window, so
// one GC cycle or one burst of connections does not decide the verdict.
const samplesPerEnd = 3

// check compares the samples after warm-up and counts the failed requests.
func (r *Result) check() {
	s := r.Load.Summary
	if s.Failed > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d of %d requests failed (status %v, transport %v)",
			s.Failed, s.Requests, r.Load.Status, r.Load.TransportErrors))
	}
	// Open loop: a request is missed when it is due while every connection still
	// waits for an answer. A few at a GC pause or a compaction are the load
	// generator's problem; more mean the node does not keep up with the rate.
	if s.Missed*100 > s.Requests+s.Missed {
		r.Failures = append(r.Failures, fmt.Sprintf("%d requests were due but never sent (over 1%%): the node fell behind the rate", s.Missed))
	}
	var after []Sample
	for _, s := range r.Samples {
		if s.Seconds >= r.Warmup {
			after = append(after, s)
		}
	}
	if len(after) < 2*samplesPerEnd {
		r.Failures = append(r.Failures, fmt.Sprintf("only %d samples after the warm-up: the run is too short to judge", len(after)))
		return
	}
	r.Baseline, r.End = mean(after[:samplesPerEnd]), mean(after[len(after)-samplesPerEnd:])
	r.RSSGrowth = growth(r.Baseline.RSSBytes, r.End.RSSBytes)
	r.GoroutineGrowth = growth(r.Baseline.Goroutines, r.End.Goroutines)
	if r.RSSGrowth >= r.MaxGrowth {
		r.Failures = append(r.Failures, fmt.Sprintf("RSS grew %.1f%% after warm-up (%.1f → %.1f MiB)",
			100*r.RSSGrowth, mib(r.Baseline.RSSBytes), mib(r.End.RSSBytes)))
	}
	if r.GoroutineGrowth >= r.MaxGrowth {
		r.Failures = append(r.Failures, fmt.Sprintf("goroutines grew %.1f%% after warm-up (%d → %d)",
			100*r.GoroutineGrowth, r.Baseline.Goroutines, r.End.Goroutines))
	}
}

func mean(s []Sample) Sample {
	var m Sample
	for _, x := range s {
		m.Seconds += x.Seconds
		m.RSSBytes += x.RSSBytes
		m.Goroutines += x.Goroutines
		m.HeapBytes += x.HeapBytes
	}
	n := float64(len(s))
	return Sample{Seconds: m.Seconds / n, RSSBytes: int64(float64(m.RSSBytes) / n),
		Goroutines: int64(float64(m.Goroutines)/n + 0.5), HeapBytes: int64(float64(m.HeapBytes) / n)}
}

func growth(from, to int64) float64 {
	if from <= 0 {
		return 0
	}
	return float64(to-from) / float64(from)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func runFleet(ctx context.Context, o fleet.Options) (*report.Report, error) {
	fl, err := fleet.New(ctx, o)
	if err != nil {
		return nil, err
	}
	return fl.Run(ctx)
}

// node is a started sluice binary.
type node struct {
	cmd  *exec.Cmd
	url  string
	dir  string
	tmp  bool
	exit chan error
}

func startNode(ctx context.Context, bin, dataDir string) (*node, error) {
	tmp := dataDir == ""
	dir, err := os.MkdirTemp(dataDir, "sluice-soak-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	logFile, err := os.Create(filepath.Join(dir, "sluice.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "HTTP_BIND_ADDRESS=127.0.0.1", "HTTP_BIND_PORT="+strconv.Itoa(port),
		"SLUICE_DATA_DIR="+filepath.Join(dir, "data"), "SLUICE_DEMO=true", "SLUICE_LOG_LEVEL=warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	n := &node{cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d", port), dir: dir, tmp: tmp, exit: make(chan error, 1)}
	go func() { n.exit <- cmd.Wait(); logFile.Close() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := n.alive(); err == nil {
			return n, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			n.stop()
			return nil, fmt.Errorf("soak: the node did not come up (log: %s): %w", filepath.Join(dir, "sluice.log"), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// alive checks /healthz.
func (n *node) alive() error {
	select {
	case err := <-n.exit:
		n.exit <- err
		return fmt.Errorf("the node exited: %v", err)
	default:
	}
	resp, err := http.Get(n.url + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz answered %d", resp.StatusCode)
	}
	return nil
}

// sample reads the node's RSS from /proc and its goroutines and heap from /metrics.
func (n *node) sample() (Sample, error) {
	var s Sample
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
	if err != nil {
		return s, err
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return s, fmt.Errorf("VmRSS %q: %w", v, err)
			}
			s.RSSBytes = kb << 10
		}
	}
	resp, err := http.Get(n.url + "/metrics")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return s, err
	}
	for sc := bufio.NewScanner(bytes.NewReader(body)); sc.Scan(); {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "go_goroutines":
			s.Goroutines, _ = strconv.ParseInt(v, 10, 64)
		case "go_memstats_heap_inuse_bytes":
			s.HeapBytes, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if s.RSSBytes == 0 || s.Goroutines == 0 {
		return s, errors.New("no VmRSS in /proc or no go_goroutines in /metrics")
	}
	return s, nil
}

// stop ends the node with SIGTERM (a clean drain), SIGKILL after 30 s, and
// removes a temporary folder.
func (n *node) stop() {
	if n.cmd.Process != nil {
		n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-n.exit:
			n.exit <- err
		case <-time.After(30 * time.Second):
			n.cmd.Process.Kill()
		}
	}
	if n.tmp {
		os.RemoveAll(n.dir)
	}
}
