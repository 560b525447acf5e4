// Package loadtest is an HTTP load generator: K workers, each with its own connection,
// send requests until a duration or a request count runs out. Closed loop (the
// default), a worker sends the next request as soon as the previous one is answered;
// open loop (Config.Rate), requests are due on a fixed schedule and their latency is
// measured from when they were due, so a stalled target is not hidden by the
// generator waiting for it (coordinated omission). It records status counts, transport
// errors, an HDR histogram of latency, and optionally a timeline of one Sample per
// Config.Interval.
//
// It only ever connects to Config.Addr. The bench harness (bench/) and the fleet
// simulator (loadtest/fleet, cmd/sluice-load) build on it: a Generator decides the
// path and body of each request, an optional Observer sees every answer.
package loadtest

import (
	"crypto/tls"
	"errors"
	"fmt"
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
	// Generate fills each request (required).
	Generate Generator
	// Observe, when set, sees every recorded request.
	Observe Observer
	// Stop, when set and closed, ends the run early: no request starts after it,
	// those in flight are waited for and recorded.
	Stop <-chan struct{}
	// Interval, when above 0, cuts the measured run into intervals: Result.Timeline
	// gets one Sample per interval, and OnSample, when set, sees each as it ends.
	Interval time.Duration
	OnSample func(Sample)
}

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
	Elapsed  time.Duration // from the end of warm-up to the last answer
	// Latency is in µs, of answered and failed requests: from the send in a closed
	// loop, from when the request was due in an open loop. An open loop also
	// records each Missed request, at the time from when it was due to the end of
	// the run (a lower bound), so a target that stalls near the end does not drop
	// its slowest requests from the percentiles.
	Latency *hdrhistogram.Histogram
	// Service is the latency from the actual send (µs); the same as Latency in a
	// closed loop. In an open loop, Latency far above Service means requests waited
	// for a free connection: the target, or Connections, did not keep up with Rate.
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

// PointsPerSec is data points acknowledged (2xx) per second.
func (r *Result) PointsPerSec() float64 { return perSec(r.Points, r.Elapsed) }

// Quantile is the latency at percentile q (0 … 100) of answered and failed requests.
func (r *Result) Quantile(q float64) time.Duration {
	return time.Duration(r.Latency.ValueAtQuantile(q)) * time.Microsecond
}

// Max is the highest latency recorded.
func (r *Result) Max() time.Duration { return time.Duration(r.Latency.Max()) * time.Microsecond }

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
	workers := make([]*worker, cfg.Connections)
	for i := range workers {
		workers[i] = newWorker(r, i)
	}
	var smp *sampler
	if cfg.Interval > 0 {
		smp = newSampler(r, workers)
		go smp.loop()
	}
	finished := make(chan struct{})
	if cfg.Stop != nil {
		go func() {
			select {
			case <-cfg.Stop:
				r.stoppedAt.Store(time.Now().UnixNano())
				r.stopped.Store(true)
				close(r.halt)
			case <-finished:
			}
		}()
	}
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(w.loop)
	}
	wg.Wait()
	close(finished)
	end := time.Now()

	res := collect(workers)
	res.Elapsed = max(end.Sub(r.measureFrom), 0) // interrupted in the warm-up: nothing measured
	res.Missed = r.recordMissed(res.Latency, end)
	if smp != nil {
		res.Timeline = smp.stop(end)
	}
	return res, nil
}

// collect merges what the workers measured.
func collect(workers []*worker) *Result {
	res := &Result{Status: map[int]int64{}, Latency: newHistogram(), Service: newHistogram(),
		TransportErrors: map[string]int64{}, Kinds: map[string]*Counts{}}
	for _, w := range workers {
		res.Requests += w.requests
		res.Points += w.points
		res.Errors += w.errors
		if res.FirstErr == nil {
			res.FirstErr = w.firstErr
		}
		for s, c := range w.status {
			res.Status[s] += c
		}
		for k, c := range w.transport {
			res.TransportErrors[k] += c
		}
		for k, c := range w.kinds {
			res.Kinds[k] = c.merge(res.Kinds[k])
		}
		res.Latency.Merge(w.hist)
		if w.service != nil {
			res.Service.Merge(w.service)
		} else {
			res.Service.Merge(w.hist)
		}
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

// recordMissed records each missed request in h at the time from when it was due
// to the end of the run, a lower bound of its latency: a target that stalls until
// the end must not leave the stalled requests out of the percentiles (they would
// otherwise be the ones coordinated omission hides). It returns how many there were.
func (r *run) recordMissed(h *hdrhistogram.Histogram, end time.Time) int64 {
	from, to, until := r.missedSlots(end)
	for i := from; i < to; i++ {
		_ = h.RecordValue(min(until.Sub(r.sched.at(i)), maxLatency).Microseconds())
	}
	return to - from
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
	if c.Duration <= 0 && c.Requests <= 0 {
		return errors.New("loadtest: neither Duration nor Requests bounds the run")
	}
	if c.Duration < 0 || c.Requests < 0 || c.Warmup < 0 || c.Connections < 0 || c.Timeout < 0 || c.Rate < 0 || c.Interval < 0 {
		return errors.New("loadtest: negative Duration, Requests, Warmup, Connections, Timeout, Rate or Interval")
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
	stopped     atomic.Bool   // Config.Stop was closed
	stoppedAt   atomic.Int64  // when, in Unix ns
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
		if r.cfg.Requests > 0 && r.issued.Add(1) > r.cfg.Requests {
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
	if n := r.issued.Add(1); r.cfg.Requests > 0 && n > r.cfg.Requests {
		return ticket{}
	}
	return ticket{ok: true, record: true, due: due}
}

// worker is one loop over one connection. The sampler reads its counters while it
// runs, under mu; Run merges them after it ends.
type worker struct {
	run  *run
	id   int
	req  Request
	hreq *fasthttp.Request
	resp *fasthttp.Response
	uri  []byte

	mu                       sync.Mutex
	requests, points, errors int64
	firstErr                 error
	status                   map[int]int64
	transport                map[string]int64
	kinds                    map[string]*Counts
	hist                     *hdrhistogram.Histogram
	service                  *hdrhistogram.Histogram // open loop only
	win                      window                  // with Config.Interval only
}

func newWorker(r *run, id int) *worker {
	w := &worker{run: r, id: id, hreq: &fasthttp.Request{}, resp: &fasthttp.Response{},
		status: map[int]int64{}, transport: map[string]int64{}, kinds: map[string]*Counts{}, hist: newHistogram()}
	if r.sched != nil {
		w.service = newHistogram()
	}
	if r.cfg.Interval > 0 {
		w.win.hist = newHistogram()
	}
	return w
}

func (w *worker) loop() {
	var wait *time.Timer
	for seq := uint64(0); ; seq++ {
		t := w.run.take(time.Now())
		if !t.ok {
			return
		}
		if !t.due.IsZero() {
			if d := time.Until(t.due); d > 0 {
				if wait == nil {
					wait = time.NewTimer(d)
				} else {
					wait.Reset(d)
				}
				// A Stop ends the wait: the request, due after it, is not sent.
				select {
				case <-wait.C:
					if w.run.stopped.Load() { // the Stop came as the wait ended
						return
					}
				case <-w.run.halt:
					wait.Stop()
					return
				}
			}
		}
		w.once(seq, t)
	}
}

func (w *worker) once(seq uint64, t ticket) {
	cfg := &w.run.cfg
	w.req.Path, w.req.Body, w.req.Points, w.req.Kind = "", w.req.Body[:0], 0, ""
	cfg.Generate(w.id, seq, &w.req)

	w.hreq.Reset()
	w.uri = append(append(w.uri[:0], w.run.prefix...), w.req.Path...)
	w.hreq.SetRequestURIBytes(w.uri)
	if len(w.req.Body) > 0 {
		w.hreq.Header.SetMethod(fasthttp.MethodPost)
		w.hreq.Header.SetContentType(cfg.ContentType)
		w.hreq.SetBodyRaw(w.req.Body)
	}
	w.resp.Reset()

	t0 := time.Now()
	err := w.run.client.DoTimeout(w.hreq, w.resp, cfg.Timeout)
	done := time.Now()
	if !t.record {
		return
	}
	status := 0
	if err == nil {
		status = w.resp.StatusCode()
	}
	w.record(t, t0, done, status, err)
	if cfg.Observe != nil {
		cfg.Observe(w.id, seq, &w.req, status, err)
	}
}

// record counts one recorded request that was sent at sent and ended at done.
func (w *worker) record(t ticket, sent, done time.Time, status int, err error) {
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

	w.mu.Lock()
	defer w.mu.Unlock()
	var kind *Counts
	if w.req.Kind != "" {
		if kind = w.kinds[w.req.Kind]; kind == nil {
			kind = &Counts{Status: map[int]int64{}}
			w.kinds[w.req.Kind] = kind
		}
	}
	if err != nil {
		w.errors++
		if w.firstErr == nil {
			w.firstErr = err
		}
		w.transport[Classify(err)]++
		if kind != nil {
			kind.Errors++
		}
	} else {
		w.requests++
		w.status[status]++
		w.points += points
		if kind != nil {
			kind.Requests++
			kind.Status[status]++
			kind.Points += points
		}
	}
	w.hist.RecordValue(lat)
	if w.service != nil {
		w.service.RecordValue(min(done.Sub(sent), maxLatency).Microseconds())
	}
	if w.win.hist != nil {
		w.win.add(lat, ok, err != nil, points)
	}
}
