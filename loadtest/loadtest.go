// Package loadtest is a closed-loop HTTP load generator: K workers, each with its own
// connection, send a request, wait for the answer, record it, and send the next, until
// a duration or a request count runs out. It records status counts and an HDR histogram
// of latency, and reports requests and data points per second.
//
// It only ever connects to Config.Addr. The bench harness (bench/) and the fleet
// simulator build on it: a Generator decides the path and body of each request, an
// optional Observer sees every answer.
package loadtest

import (
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
	// Connections is the number of concurrent workers, one connection each (default 1).
	Connections int
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
}

// maxLatency is the highest latency the histogram tracks; slower requests are
// recorded as maxLatency.
const maxLatency = time.Minute

// Result is what a run measured (warm-up excluded).
type Result struct {
	Requests int64         // answered requests, any status
	Points   int64         // data points of 2xx-answered requests
	Errors   int64         // requests that got no answer (connection error, timeout)
	FirstErr error         // the first such error, for the message
	Status   map[int]int64 // answered requests by status code
	Elapsed  time.Duration // from the end of warm-up to the last answer
	Latency  *hdrhistogram.Histogram
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
		MaxConns:                  cfg.Connections,
		MaxIdemponentCallAttempts: 1, // a retried POST would count twice
		ReadTimeout:               cfg.Timeout,
		WriteTimeout:              cfg.Timeout,
		NoDefaultUserAgentHeader:  true,
	}
	defer client.CloseIdleConnections()

	r := &run{cfg: cfg, client: client}
	start := time.Now()
	r.measureFrom = start.Add(cfg.Warmup)
	if cfg.Duration > 0 {
		r.stopAt = r.measureFrom.Add(cfg.Duration)
	}
	workers := make([]*worker, cfg.Connections)
	var wg sync.WaitGroup
	for i := range workers {
		w := newWorker(r, i)
		workers[i] = w
		wg.Go(w.loop)
	}
	wg.Wait()
	end := time.Now()

	res := &Result{Status: map[int]int64{}, Latency: newHistogram()}
	res.Elapsed = end.Sub(r.measureFrom)
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
		res.Latency.Merge(w.hist)
	}
	return res, nil
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
	if c.Duration < 0 || c.Requests < 0 || c.Warmup < 0 || c.Connections < 0 || c.Timeout < 0 {
		return errors.New("loadtest: negative Duration, Requests, Warmup, Connections or Timeout")
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
	measureFrom time.Time
	stopAt      time.Time // zero when only Requests bounds the run
	issued      atomic.Int64
}

// take reports whether a worker may start another request at now, and whether that
// request is recorded (it is not during warm-up).
func (r *run) take(now time.Time) (ok, record bool) {
	if now.Before(r.measureFrom) {
		return true, false
	}
	if !r.stopAt.IsZero() && !now.Before(r.stopAt) {
		return false, false
	}
	if r.cfg.Requests > 0 && r.issued.Add(1) > r.cfg.Requests {
		return false, false
	}
	return true, true
}

// worker is one closed loop; its counters are its own until Run merges them.
type worker struct {
	run  *run
	id   int
	req  Request
	hreq *fasthttp.Request
	resp *fasthttp.Response
	uri  []byte

	requests, points, errors int64
	firstErr                 error
	status                   map[int]int64
	hist                     *hdrhistogram.Histogram
}

func newWorker(r *run, id int) *worker {
	return &worker{run: r, id: id, hreq: &fasthttp.Request{}, resp: &fasthttp.Response{},
		status: map[int]int64{}, hist: newHistogram()}
}

func (w *worker) loop() {
	for seq := uint64(0); ; seq++ {
		ok, record := w.run.take(time.Now())
		if !ok {
			return
		}
		w.once(seq, record)
	}
}

func (w *worker) once(seq uint64, record bool) {
	cfg := &w.run.cfg
	w.req.Path, w.req.Body, w.req.Points = "", w.req.Body[:0], 0
	cfg.Generate(w.id, seq, &w.req)

	w.hreq.Reset()
	w.uri = append(append(append(w.uri[:0], "http://"...), cfg.Addr...), w.req.Path...)
	w.hreq.SetRequestURIBytes(w.uri)
	if len(w.req.Body) > 0 {
		w.hreq.Header.SetMethod(fasthttp.MethodPost)
		w.hreq.Header.SetContentType(cfg.ContentType)
		w.hreq.SetBodyRaw(w.req.Body)
	}
	w.resp.Reset()

	t0 := time.Now()
	err := w.run.client.DoTimeout(w.hreq, w.resp, cfg.Timeout)
	lat := time.Since(t0)
	if !record {
		return
	}
	status := 0
	if err != nil {
		w.errors++
		if w.firstErr == nil {
			w.firstErr = err
		}
	} else {
		status = w.resp.StatusCode()
		w.requests++
		w.status[status]++
		if status >= 200 && status < 300 {
			w.points += int64(w.req.Points)
		}
	}
	w.hist.RecordValue(min(lat, maxLatency).Microseconds())
	if cfg.Observe != nil {
		cfg.Observe(w.id, seq, &w.req, status, err)
	}
}
