// Package loadtest is an HTTP load generator: K workers, each with its own connection,
// send requests until a duration or a request count runs out. Closed loop (the
// default), a worker sends the next request as soon as the previous one is answered;
// open loop (Config.Rate), requests are due on a fixed schedule and their latency is
// measured from when they were due, so a stalled target is not hidden by the
// generator waiting for it (coordinated omission). It records status counts, transport
// errors, HDR histograms of latency (of 2xx answers, and of failed requests apart),
// and optionally a timeline of one Sample per Config.Interval.
//
// It only ever connects to Config.Addr. The bench harness (bench/) and the fleet
// simulator (loadtest/fleet, cmd/sluice-load) build on it: a Generator decides the
// path and body of each request, an optional Observer sees every answer.
package loadtest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"
)

// Request is what a Generator fills for one call. Its buffers are reused by the
// worker that owns it: append to Body[:0], do not keep it after returning.
type Request struct {
	// Path is the request URI on the target, e.g. "/api/v1/TOKEN/telemetry".
	Path string
	// Body is the POST body; empty means GET.
	Body []byte
	// Points is the number of data points the body carries, counted once the
	// request is answered 2xx.
	Points int
	// Kind, when set, counts the request under Result.Kinds[Kind] as well
	// ("telemetry", "attributes").
	Kind string
}

// Generator fills r for request number seq (0, 1, …) of worker (0 … Connections-1).
// Each worker calls it from its own goroutine; different workers call it concurrently.
type Generator func(worker int, seq uint64, r *Request)

// Observer sees every answered or failed request, from the worker's goroutine; status
// is 0 when err is set. It must not keep r.
type Observer func(worker int, seq uint64, r *Request, status int, err error)

// Config is one load run. At least one of Duration and Requests bounds it.
type Config struct {
	// Addr is the host:port every connection goes to.
	Addr string
	// TLS connects with HTTPS; TLSConfig, when set, configures it.
	TLS       bool
	TLSConfig *tls.Config
	// Connections is the number of concurrent workers, one connection each (default 1).
	Connections int
	// Rate, when above 0, runs open loop: request i (over all workers) is due at
	// start + i/Rate, whichever worker is free takes it, and its latency counts from
	// when it was due. 0 runs closed loop, flat out.
	Rate float64
	// Duration stops the workers from starting requests after it (warm-up excluded);
	// requests in flight then are still waited for and recorded.
	Duration time.Duration
	// Requests caps the recorded requests over all workers (0 = only Duration bounds).
	Requests int64
	// Warmup runs the load first for this long without recording it.
	Warmup time.Duration
	// Timeout bounds each request (default 10s); a timeout counts as an error.
	Timeout time.Duration
	// ContentType of POST bodies (default application/json).
	ContentType string
	// Encoding, when set, compresses every POST body with it and names it in
	// Content-Encoding: EncodingGzip or EncodingZstd ("" sends bodies as they
	// are). Each worker keeps its encoder, and a body equal to the worker's
	// previous one reuses its compressed bytes.
	Encoding string
	// Generate fills each request (required).
	Generate Generator
	// Observe, when set, sees every recorded request.
	Observe Observer
	// Stop, when set and closed, ends the run early: no request starts after it,
	// those in flight are waited for and recorded.
	Stop <-chan struct{}
	// Abort, when set and closed, ends the run like Stop and also ends the wait
	// for requests in flight: Run returns at once without them (Result.Aborted).
	// They finish in the background, bounded by Timeout, and are not counted.
	Abort <-chan struct{}
	// Interval, when above 0, cuts the measured run into intervals: Result.Timeline
	// gets one Sample per interval, and OnSample, when set, sees each as it ends.
	// A last interval shorter than half of one is merged into the one before, which
	// OnSample then sees a second time, grown.
	Interval time.Duration
	OnSample func(Sample)
}

// MaxRate is the highest Config.Rate (requests per second) a run accepts: far
// above what one generator's connections can send (a few hundred thousand a
// second), and low enough that the schedule's arithmetic stays exact and the
// bookkeeping of the requests it misses stays small. A higher rate is refused,
// not clamped: it is a typo (1e300), not a load test.
const MaxRate = 10_000_000

// maxLatency is the highest latency the histogram tracks; slower requests are
// recorded as maxLatency. An hour: in an open loop against an overloaded
// target, latency counted from the due time grows through the run, and a
// minute's cap made p99.9 and max read 60000 ms whatever they were.
const maxLatency = time.Hour

// Result is what a run measured (warm-up excluded).
type Result struct {
	Requests int64         // answered requests, any status
	Points   int64         // data points of 2xx-answered requests
	Errors   int64         // requests that got no answer (connection error, timeout)
	FirstErr error         // the first such error, for the message
	Status   map[int]int64 // answered requests by status code
	// Elapsed is the measured run: from the end of warm-up to the end of the
	// Duration, or to the Stop when that came first. The rates are over it.
	// Requests still in flight at its end are waited for (Drain) and counted, but
	// the wait is not part of Elapsed: it would understate the rates by up to
	// Timeout. When Requests ran out first, the run ends at the later of the last
	// send and the last answer: ending it at the last send would give 16 requests
	// on 16 connections, all sent within a millisecond, a rate of thousands.
	Elapsed time.Duration
	// Drain is the time from the end of Elapsed to the last answer.
	Drain time.Duration
	// Aborted is set when Config.Abort ended the wait for requests in flight:
	// those are in no count.
	Aborted bool
	// Latency is in µs, of 2xx answers only: from the send in a closed loop, from
	// when the request was due in an open loop. Failed requests are in
	// FailedLatency instead (a refused connection or a fast 503 would make a dead
	// target look quick), missed ones in MissedLatency.
	Latency *hdrhistogram.Histogram
	// MissedLatency (open loop only; nil in a closed loop) has each Missed
	// request at the time from when it was due to the end of the run, a lower
	// bound of what it would have waited. Merged with Latency (Quantile, Max,
	// LatencyInclMissed) it keeps a target that stalls near the end from dropping
	// its slowest requests from the percentiles.
	MissedLatency *hdrhistogram.Histogram
	// FailedLatency is the latency (µs, measured as Latency is) of the requests
	// answered other than 2xx or not answered at all.
	FailedLatency *hdrhistogram.Histogram
	// Service is the latency of 2xx answers from the actual send (µs); the same as
	// Latency in a closed loop. In an open loop, Latency far above Service means
	// requests waited for a free connection: the target, or Connections, did not
	// keep up with Rate.
	Service *hdrhistogram.Histogram
	// TransportErrors counts the Errors by kind ("timeout", "connection refused", …).
	TransportErrors map[string]int64
	// Kinds counts requests that named a Kind, by kind.
	Kinds map[string]*Counts
	// Missed is the number of open-loop requests that came due before the end of the
	// Duration but were never sent because every connection was busy.
	Missed int64
	// Timeline has one Sample per Config.Interval (the last may be shorter).
	Timeline []Sample

	inclMissed *hdrhistogram.Histogram // Latency and MissedLatency, when Run merged them
}

// Counts are the requests of one Kind.
type Counts struct {
	Requests int64         // answered, any status
	Points   int64         // data points of 2xx answers
	Errors   int64         // no answer
	Status   map[int]int64 // answered, by status
}

// ReqPerSec is answered requests per second.
func (r *Result) ReqPerSec() float64 { return perSec(r.Requests, r.Elapsed) }

// OKPerSec is requests answered 2xx per second.
func (r *Result) OKPerSec() float64 { return perSec(r.OK(), r.Elapsed) }

// PointsPerSec is data points acknowledged (2xx) per second.
func (r *Result) PointsPerSec() float64 { return perSec(r.Points, r.Elapsed) }

// Quantile is the latency at percentile q (0 … 100) of the 2xx answers and, in
// an open loop, the Missed requests (LatencyInclMissed).
func (r *Result) Quantile(q float64) time.Duration {
	return time.Duration(r.LatencyInclMissed().ValueAtQuantile(q)) * time.Microsecond
}

// Max is the highest latency of the 2xx answers and, in an open loop, the Missed
// requests (LatencyInclMissed).
func (r *Result) Max() time.Duration {
	return time.Duration(r.LatencyInclMissed().Max()) * time.Microsecond
}

// LatencyInclMissed is Latency with MissedLatency merged in: what a device
// would have seen, from the due time, had the missed requests been answered at
// the end of the run. It is Latency itself when nothing was missed.
func (r *Result) LatencyInclMissed() *hdrhistogram.Histogram {
	if r.MissedLatency == nil || r.MissedLatency.TotalCount() == 0 {
		return r.Latency
	}
	if r.inclMissed != nil { // Run merged them once
		return r.inclMissed
	}
	return mergeHistograms(r.Latency, r.MissedLatency)
}

func mergeHistograms(hs ...*hdrhistogram.Histogram) *hdrhistogram.Histogram {
	h := newHistogram()
	for _, x := range hs {
		if x != nil {
			h.Merge(x)
		}
	}
	return h
}

// Failed is the number of requests answered other than 2xx or not answered at all.
func (r *Result) Failed() int64 { return r.Requests - r.OK() + r.Errors }

// OK is the number of requests answered 2xx.
func (r *Result) OK() int64 {
	var n int64
	for s, c := range r.Status {
		if s >= 200 && s < 300 {
			n += c
		}
	}
	return n
}

// String is a one-line summary.
func (r *Result) String() string {
	return fmt.Sprintf("%d req in %v: %.0f req/s, %.0f points/s, p50 %v p90 %v p99 %v p99.9 %v max %v, status %v, errors %d",
		r.Requests, r.Elapsed.Round(time.Millisecond), r.ReqPerSec(), r.PointsPerSec(),
		r.Quantile(50), r.Quantile(90), r.Quantile(99), r.Quantile(99.9), r.Max(), r.Status, r.Errors)
}

func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Run drives the load described by cfg and returns what it measured. It returns an
// error only for a bad Config; failed requests are counted in the Result.
func Run(cfg Config) (*Result, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	client := &fasthttp.HostClient{
		Addr:                      cfg.Addr,
		IsTLS:                     cfg.TLS,
		TLSConfig:                 cfg.TLSConfig,
		MaxConns:                  cfg.Connections,
		MaxIdemponentCallAttempts: 1, // a retried POST would count twice
		ReadTimeout:               cfg.Timeout,
		WriteTimeout:              cfg.Timeout,
		NoDefaultUserAgentHeader:  true,
	}
	defer client.CloseIdleConnections()

	scheme := "http://"
	if cfg.TLS {
		scheme = "https://"
	}
	r := &run{cfg: cfg, client: client, prefix: scheme + cfg.Addr, halt: make(chan struct{})}
	start := time.Now()
	r.measureFrom = start.Add(cfg.Warmup)
	if cfg.Duration > 0 {
		r.stopAt = r.measureFrom.Add(cfg.Duration)
	}
	if cfg.Rate > 0 {
		r.sched = &schedule{start: start, rate: cfg.Rate}
	}
	recs := make([]*recorder, recorders(cfg.Connections))
	for i := range recs {
		recs[i] = newRecorder(r)
	}
	workers := make([]*worker, cfg.Connections)
	for i := range workers {
		workers[i] = &worker{run: r, id: i, rec: recs[i%len(recs)], hreq: &fasthttp.Request{}, resp: &fasthttp.Response{}}
		if cfg.Encoding != "" {
			workers[i].enc = newEncoder(cfg.Encoding)
		}
	}
	var smp *sampler
	if cfg.Interval > 0 {
		smp = newSampler(r, recs)
		go smp.loop()
	}
	finished := make(chan struct{})
	if cfg.Stop != nil || cfg.Abort != nil {
		go func() {
			select {
			case <-cfg.Stop:
			case <-cfg.Abort:
			case <-finished:
				return
			}
			r.stop(time.Now())
		}()
	}
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(w.loop)
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	aborted := false
	select {
	case <-workersDone:
	case <-cfg.Abort:
		// Leave the requests in flight: r.stop keeps the workers from starting more,
		// and collect closes the recorders to what they would still record.
		aborted = true
		r.stop(time.Now())
	}
	close(finished)
	last := time.Now()

	end, ok := r.measuredEnd()
	if !ok { // cannot happen: the workers end only at one of the bounds
		end = last
	}
	res := collect(recs)
	res.Elapsed = end.Sub(r.measureFrom) // measuredEnd is not before measureFrom
	res.Drain = max(last.Sub(end), 0)
	res.Aborted = aborted
	if r.sched != nil {
		res.MissedLatency = newHistogram()
		res.Missed = r.recordMissed(res.MissedLatency, last)
		if res.Missed > 0 {
			res.inclMissed = mergeHistograms(res.Latency, res.MissedLatency)
		}
	}
	if smp != nil {
		res.Timeline = smp.stop(end)
	}
	return res, nil
}

// maxRecorders bounds the recorders of a run. Each holds up to four histograms
// of about 190 KB (1 µs to 1 h at 3 significant digits): with one per worker,
// 2000 connections took over a gigabyte. A few, each shared by several workers
// under its lock, keep the lock contention low at any rate HTTP reaches.
const maxRecorders = 8

// recorders is how many recorders a run of connections workers gets.
func recorders(connections int) int {
	return max(1, min(connections, runtime.GOMAXPROCS(0), maxRecorders))
}

// collect merges what the recorders measured, and closes them: a request left in
// flight by an Abort records nothing after this.
func collect(recs []*recorder) *Result {
	res := &Result{Status: map[int]int64{}, Latency: newHistogram(), FailedLatency: newHistogram(), Service: newHistogram(),
		TransportErrors: map[string]int64{}, Kinds: map[string]*Counts{}}
	for _, rec := range recs {
		rec.mu.Lock()
		rec.closed = true
		res.Requests += rec.requests
		res.Points += rec.points
		res.Errors += rec.errors
		if res.FirstErr == nil {
			res.FirstErr = rec.firstErr
		}
		for s, c := range rec.status {
			res.Status[s] += c
		}
		for k, c := range rec.transport {
			res.TransportErrors[k] += c
		}
		for k, c := range rec.kinds {
			res.Kinds[k] = c.merge(res.Kinds[k])
		}
		res.Latency.Merge(rec.hist)
		res.FailedLatency.Merge(rec.failed)
		if rec.service != nil {
			res.Service.Merge(rec.service)
		} else {
			res.Service.Merge(rec.hist)
		}
		rec.mu.Unlock()
	}
	return res
}

// missedSlots are the schedule's indexes [from, to) of the recorded open-loop
// requests due before the end of the Duration (or the Stop, when that came
// first) that never started, and until is the end they were missed by. Workers take slots in order, so the
// recorded slots taken are the first issued ones after the warm-up, and the
// missed ones follow them.
func (r *run) missedSlots(end time.Time) (from, to int64, until time.Time) {
	if r.sched == nil || r.stopAt.IsZero() {
		return 0, 0, time.Time{}
	}
	until = r.stopAt
	if r.stopped.Load() {
		// The Stop itself, not the last answer after it, ends the schedule.
		stop := end
		if ns := r.stoppedAt.Load(); ns != 0 {
			stop = time.Unix(0, ns)
		}
		if stop.Before(until) {
			until = stop
		}
	}
	first := r.sched.before(r.measureFrom)
	due := max(0, r.sched.before(until)-first)
	if r.cfg.Requests > 0 {
		due = min(due, r.cfg.Requests)
	}
	issued := min(r.issued.Load(), due)
	return first + issued, first + due, until
}

// recordMissed records each missed request in h (Result.MissedLatency) at the
// time from when it was due to the end of the run, a lower bound of its latency:
// a target that stalls until the end must not leave the stalled requests out of
// the percentiles that include them (they would otherwise be the ones
// coordinated omission hides). It returns how many there were.
//
// The missed requests are evenly spaced on the schedule, so their latencies fall
// in order: it records them in runs, every request whose latency lands in the
// histogram bucket of the first one at once (RecordValues), and finds the end of
// each run with schedule.before. So the cost is bounded by the histogram's
// buckets (about 23,000 between 1 µs and 1 h), not by the number of requests
// missed: recording them one by one, -rate 1e8 took seconds after the run.
func (r *run) recordMissed(h *hdrhistogram.Histogram, end time.Time) int64 {
	from, to, until := r.missedSlots(end)
	latency := func(i int64) int64 { return min(until.Sub(r.sched.at(i)), maxLatency).Microseconds() }
	for i := from; i < to; {
		v := latency(i) // the latencies fall as i grows
		// The requests j >= i in v's bucket are those with latency(j) >= low, that
		// is due at or before until - low µs, or before that plus 1 ns.
		low := lowestEquivalent(h, v)
		next := r.sched.before(until.Add(-time.Duration(low)*time.Microsecond + 1))
		next = min(max(next, i+1), to)
		_ = h.RecordValues(v, next-i)
		i = next
	}
	return to - from
}

// lowestEquivalent is the lowest value h counts together with v (the start of
// v's bucket), found with the histogram's exported ValuesAreEquivalent: its
// buckets are ranges of consecutive values.
func lowestEquivalent(h *hdrhistogram.Histogram, v int64) int64 {
	lo, hi := int64(0), v
	for lo < hi {
		mid := lo + (hi-lo)/2
		if h.ValuesAreEquivalent(mid, v) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// measuredEnd is when the measured run ends, and whether that is known yet: the
// end of the Duration; the Stop, when it came first; or, once Requests ran out
// and every one of them was answered (or failed), the later of the last send and
// the last answer (in an open loop not before the next slot would have been due,
// so that N requests at Rate span N/Rate). Ending at the last send alone made N
// requests on N connections, sent within a millisecond, read as thousands per
// second. It is never before measureFrom. The answers that come after it are the
// drain.
func (r *run) measuredEnd() (end time.Time, known bool) {
	use := func(t time.Time) {
		if !known || t.Before(end) {
			end, known = t, true
		}
	}
	if !r.stopAt.IsZero() {
		use(r.stopAt)
	}
	if r.stopped.Load() {
		use(time.Unix(0, r.stoppedAt.Load()))
	}
	if n := r.cfg.Requests; n > 0 && r.issued.Load() >= n && r.inflight.Load() == 0 {
		var last time.Time
		if ns := max(r.lastSent.Load(), r.lastDone.Load()); ns != 0 {
			last = time.Unix(0, ns)
		}
		if r.sched != nil {
			first := r.sched.before(r.measureFrom) // at most maxSlot
			if next := r.sched.at(first + min(n, maxSlot)); next.After(last) {
				last = next
			}
		}
		if !last.IsZero() {
			use(last)
		}
	}
	if known && end.Before(r.measureFrom) { // stopped in the warm-up: nothing measured
		end = r.measureFrom
	}
	return end, known
}

// stop ends the run at now (Config.Stop or Abort): no request starts after it,
// and workers waiting for a due time or a backoff wake up.
func (r *run) stop(now time.Time) {
	r.stopOnce.Do(func() {
		r.stoppedAt.Store(now.UnixNano())
		r.stopped.Store(true)
		close(r.halt)
	})
}

// sent notes that a recorded request was sent at t, for measuredEnd.
func (r *run) sent(t time.Time) { storeLater(&r.lastSent, t) }

// done notes that a recorded request of a run bounded by Requests ended at t
// (answered, failed, or never sent because the run stopped), for measuredEnd.
func (r *run) done(t time.Time) {
	storeLater(&r.lastDone, t)
	r.inflight.Add(-1)
}

// storeLater stores t in v (Unix ns) unless v holds a later time.
func storeLater(v *atomic.Int64, t time.Time) {
	ns := t.UnixNano()
	for {
		last := v.Load()
		if ns <= last || v.CompareAndSwap(last, ns) {
			return
		}
	}
}

// merge adds c to into (nil: a new Counts) and returns it.
func (c *Counts) merge(into *Counts) *Counts {
	if into == nil {
		into = &Counts{Status: map[int]int64{}}
	}
	into.Requests += c.Requests
	into.Points += c.Points
	into.Errors += c.Errors
	for s, n := range c.Status {
		into.Status[s] += n
	}
	return into
}

func (c *Config) normalize() error {
	if c.Addr == "" {
		return errors.New("loadtest: Addr is empty")
	}
	if c.Generate == nil {
		return errors.New("loadtest: Generate is nil")
	}
	if c.Duration < 0 || c.Requests < 0 || c.Warmup < 0 || c.Connections < 0 || c.Timeout < 0 || c.Rate < 0 || c.Interval < 0 {
		return errors.New("loadtest: negative Duration, Requests, Warmup, Connections, Timeout, Rate or Interval")
	}
	if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		return fmt.Errorf("loadtest: Rate %v is not a number of requests per second", c.Rate)
	}
	if c.Rate > MaxRate {
		return fmt.Errorf("loadtest: Rate %g is above the most this generator can schedule, %g requests per second", c.Rate, float64(MaxRate))
	}
	if c.Duration == 0 && c.Requests == 0 {
		return errors.New("loadtest: neither Duration nor Requests bounds the run")
	}
	if c.Connections == 0 {
		c.Connections = 1
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.ContentType == "" {
		c.ContentType = "application/json"
	}
	if err := CheckEncoding(c.Encoding); err != nil {
		return fmt.Errorf("loadtest: %w", err)
	}
	return nil
}

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, maxLatency.Microseconds(), 3)
}

// run is the state the workers of one Run share.
type run struct {
	cfg         Config
	client      *fasthttp.HostClient
	prefix      string // scheme://addr
	measureFrom time.Time
	stopAt      time.Time // zero when only Requests bounds the run
	sched       *schedule // nil in a closed loop
	issued      atomic.Int64
	lastSent    atomic.Int64 // when the last recorded request was sent, in Unix ns; with Requests only
	lastDone    atomic.Int64 // when the last recorded request ended, in Unix ns; with Requests only
	inflight    atomic.Int64 // recorded requests taken and not yet ended; with Requests only
	stopOnce    sync.Once
	stopped     atomic.Bool   // Config.Stop or Abort was closed
	stoppedAt   atomic.Int64  // when, in Unix ns; set before stopped
	halt        chan struct{} // closed with stopped: wakes workers waiting for a due time
}

// ticket is a worker's permission to send one request.
type ticket struct {
	ok     bool      // false: the run is over for this worker
	record bool      // false during warm-up
	due    time.Time // open loop: when the request was due; zero in a closed loop
}

// take decides whether a worker may start another request at now, whether that
// request is recorded (it is not during warm-up), and in an open loop when it is due
// (it may be in the future: the worker waits for it, or in the past: the worker is
// late and the lateness counts in the latency).
func (r *run) take(now time.Time) ticket {
	if r.stopped.Load() {
		return ticket{}
	}
	if r.sched == nil {
		if now.Before(r.measureFrom) {
			return ticket{ok: true}
		}
		if !r.stopAt.IsZero() && !now.Before(r.stopAt) {
			return ticket{}
		}
		if !r.count() {
			return ticket{}
		}
		return ticket{ok: true, record: true}
	}
	// A late worker stops at the end of the Duration even with requests due before
	// it: Result.Missed counts those.
	if !r.stopAt.IsZero() && !now.Before(r.stopAt) {
		return ticket{}
	}
	due := r.sched.at(r.sched.next.Add(1) - 1)
	if !r.stopAt.IsZero() && !due.Before(r.stopAt) {
		return ticket{}
	}
	if due.Before(r.measureFrom) {
		return ticket{ok: true, due: due}
	}
	// issued counts every recorded slot taken, for Result.Missed.
	if !r.count() {
		return ticket{}
	}
	return ticket{ok: true, record: true, due: due}
}

// count counts a recorded request about to be taken in issued, and reports
// whether Requests allows it. With Requests, it is in flight (measuredEnd) from
// before it is counted until done: a request counted in issued is never missing
// from inflight.
func (r *run) count() bool {
	n := r.cfg.Requests
	if n == 0 {
		if r.sched != nil {
			r.issued.Add(1)
		}
		return true
	}
	r.inflight.Add(1)
	if r.issued.Add(1) > n {
		r.inflight.Add(-1)
		return false
	}
	return true
}

// errorBackoff is how long a closed-loop worker waits after a request got no
// answer, and any worker after a 429 or 503 without a Retry-After. Flat out
// against a dead target it would otherwise retry as fast as connections are
// refused, measuring only that and flooding whatever is there.
const errorBackoff = 100 * time.Millisecond

// MaxRetryAfter caps the wait a Retry-After asks for: a target that says "come
// back in an hour" must not stall the run (nor a cleanup) that long.
const MaxRetryAfter = 10 * time.Second

// outcome is how a request ended, for backoff.
type outcome struct {
	err        error
	status     int           // 0 with err
	retryAfter time.Duration // the answer's Retry-After; 0 when none or not 429/503
}

// throttled reports whether status asks the client to slow down: 429 Too Many
// Requests or 503 Service Unavailable.
func throttled(status int) bool {
	return status == fasthttp.StatusTooManyRequests || status == fasthttp.StatusServiceUnavailable
}

// backoff is how long a worker waits at now after a request that ended with o,
// cut at the end of the Duration:
//   - after a 429 or 503, in either loop, the answer's Retry-After (at most
//     MaxRetryAfter, at least errorBackoff), or errorBackoff without one;
//   - after no answer, errorBackoff in a closed loop. An open loop does not wait
//     there: its schedule decides when requests go.
//
// In an open loop the schedule goes on while a worker waits: the requests that
// come due meanwhile are taken by the other workers, or sent late (their latency
// from the due time includes the wait) once one is free, or counted as missed
// when the run ends first. So a throttled connection does not hammer the target,
// and the throttling shows in the latency instead of being hidden.
func (r *run) backoff(o outcome, now time.Time) time.Duration {
	var d time.Duration
	switch {
	case o.err != nil && r.sched == nil:
		d = errorBackoff
	case o.err == nil && throttled(o.status):
		d = min(max(o.retryAfter, errorBackoff), MaxRetryAfter)
	default:
		return 0
	}
	if !r.stopAt.IsZero() {
		d = min(d, r.stopAt.Sub(now))
	}
	return max(d, 0)
}

// RetryAfter parses the value of a Retry-After header at now: delay-seconds
// ("120") or an HTTP date (RFC 9110). A date in the past is 0. ok is false when
// v is empty or neither form.
func RetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > int64(math.MaxInt64/time.Second) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// recorder is what some of the workers of a run measured; the sampler reads and
// resets its window while they run, under mu.
type recorder struct {
	mu                       sync.Mutex
	closed                   bool // collected: record nothing more
	requests, points, errors int64
	firstErr                 error
	status                   map[int]int64
	transport                map[string]int64
	kinds                    map[string]*Counts
	hist                     *hdrhistogram.Histogram // 2xx answers
	failed                   *hdrhistogram.Histogram // other answers, and no answer
	service                  *hdrhistogram.Histogram // 2xx answers, from the send; open loop only
	win                      window                  // with Config.Interval only
}

func newRecorder(r *run) *recorder {
	rec := &recorder{status: map[int]int64{}, transport: map[string]int64{}, kinds: map[string]*Counts{},
		hist: newHistogram(), failed: newHistogram()}
	if r.sched != nil {
		rec.service = newHistogram()
	}
	if r.cfg.Interval > 0 {
		rec.win.hist = newHistogram()
	}
	return rec
}

// worker is one loop over one connection; it records into its recorder.
type worker struct {
	run  *run
	id   int
	rec  *recorder
	req  Request
	hreq *fasthttp.Request
	resp *fasthttp.Response
	uri  []byte
	enc  *encoder // nil without Config.Encoding
}

func (w *worker) loop() {
	var timer *time.Timer
	// wait waits for d, or until the run is stopped (false).
	wait := func(d time.Duration) bool {
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
			return !w.run.stopped.Load() // the Stop may have come as the wait ended
		case <-w.run.halt:
			timer.Stop()
			return false
		}
	}
	for seq := uint64(0); ; seq++ {
		t := w.run.take(time.Now())
		if !t.ok {
			return
		}
		if !t.due.IsZero() {
			// A Stop ends the wait: the request, due after it, is not sent.
			if d := time.Until(t.due); d > 0 && !wait(d) {
				if t.record && w.run.cfg.Requests > 0 {
					w.run.done(time.Now())
				}
				return
			}
		}
		o := w.once(seq, t)
		if d := w.run.backoff(o, time.Now()); d > 0 && !wait(d) {
			return
		}
	}
}

// once sends one request and records it; it returns how it ended.
func (w *worker) once(seq uint64, t ticket) outcome {
	cfg := &w.run.cfg
	w.req.Path, w.req.Body, w.req.Points, w.req.Kind = "", w.req.Body[:0], 0, ""
	cfg.Generate(w.id, seq, &w.req)

	w.hreq.Reset()
	w.uri = append(append(w.uri[:0], w.run.prefix...), w.req.Path...)
	w.hreq.SetRequestURIBytes(w.uri)
	if len(w.req.Body) > 0 {
		w.hreq.Header.SetMethod(fasthttp.MethodPost)
		w.hreq.Header.SetContentType(cfg.ContentType)
		if w.enc != nil {
			w.hreq.Header.Set(fasthttp.HeaderContentEncoding, cfg.Encoding)
			w.hreq.SetBodyRaw(w.enc.compress(w.req.Body))
		} else {
			w.hreq.SetBodyRaw(w.req.Body)
		}
	}
	w.resp.Reset()

	t0 := time.Now()
	counted := t.record && cfg.Requests > 0
	if counted {
		w.run.sent(t0)
	}
	err := w.run.client.DoTimeout(w.hreq, w.resp, cfg.Timeout)
	done := time.Now()
	o := outcome{err: err}
	if err == nil {
		o.status = w.resp.StatusCode()
		if throttled(o.status) {
			o.retryAfter, _ = RetryAfter(string(w.resp.Header.Peek(fasthttp.HeaderRetryAfter)), done)
		}
	}
	if counted {
		w.run.done(done)
	}
	if !t.record {
		return o
	}
	if !w.record(t, t0, done, o.status, err) {
		return o // left in flight by an Abort: Run has returned
	}
	if cfg.Observe != nil {
		cfg.Observe(w.id, seq, &w.req, o.status, err)
	}
	return o
}

// record counts one recorded request that was sent at sent and ended at done. It
// reports false, counting nothing, once the run's results were collected.
func (w *worker) record(t ticket, sent, done time.Time, status int, err error) bool {
	from := sent
	if !t.due.IsZero() {
		from = t.due
	}
	lat := min(done.Sub(from), maxLatency).Microseconds()
	ok := status >= 200 && status < 300
	points := int64(0)
	if ok {
		points = int64(w.req.Points)
	}

	rec := w.rec
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.closed {
		return false
	}
	var kind *Counts
	if w.req.Kind != "" {
		if kind = rec.kinds[w.req.Kind]; kind == nil {
			kind = &Counts{Status: map[int]int64{}}
			rec.kinds[w.req.Kind] = kind
		}
	}
	if err != nil {
		rec.errors++
		if rec.firstErr == nil {
			rec.firstErr = err
		}
		rec.transport[Classify(err)]++
		if kind != nil {
			kind.Errors++
		}
	} else {
		rec.requests++
		rec.status[status]++
		rec.points += points
		if kind != nil {
			kind.Requests++
			kind.Status[status]++
			kind.Points += points
		}
	}
	if !ok {
		rec.failed.RecordValue(lat)
	} else {
		rec.hist.RecordValue(lat)
		if rec.service != nil {
			rec.service.RecordValue(min(done.Sub(sent), maxLatency).Microseconds())
		}
	}
	if rec.win.hist != nil {
		rec.win.add(lat, ok, err != nil, points)
	}
	return true
}
