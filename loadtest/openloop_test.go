package loadtest

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func TestScheduleAt(t *testing.T) {
	f := func(rate float64, i int64, want time.Duration) {
		t.Helper()
		s := &schedule{start: t0, rate: rate}
		if got := s.at(i).Sub(t0); got != want {
			t.Fatalf("rate %v: request %d due at %v, want %v", rate, i, got, want)
		}
	}
	f(1000, 0, 0)
	f(1000, 1, time.Millisecond)
	f(1000, 2500, 2500*time.Millisecond)
	f(3, 1, 333333333)
	f(3, 3, time.Second)
	f(0.5, 1, 2*time.Second)
}

// TestScheduleBefore: before(t) counts exactly the requests whose at() is before t,
// also at boundaries where the float estimate is off by one.
func TestScheduleBefore(t *testing.T) {
	for _, rate := range []float64{1, 3, 7, 1000, 33333.3} {
		s := &schedule{start: t0, rate: rate}
		for _, d := range []time.Duration{-time.Second, 0, 1, time.Millisecond, 333333333, 333333334, time.Second, 2*time.Second + 7} {
			at := t0.Add(d)
			want := int64(0)
			for s.at(want).Before(at) {
				want++
			}
			if got := s.before(at); got != want {
				t.Fatalf("rate %v, %v after start: before = %d, want %d", rate, d, got, want)
			}
		}
	}
}

// TestScheduleExtremeRates: before answers at once at any rate, its float
// estimate clamped before the conversion to int64 (a rate of 1e300 overflowed it
// and looped about 2^63 times); at stays monotonic where its offset overflows.
func TestScheduleExtremeRates(t *testing.T) {
	check := func(s *schedule, t1 time.Time, i int64) {
		t.Helper()
		if i < 0 || i > maxSlot || (i > 0 && !s.at(i-1).Before(t1)) || (i < maxSlot && s.at(i).Before(t1)) {
			t.Fatalf("rate %g, %v after start: before = %d, not the least i with at(i) >= t", s.rate, t1.Sub(s.start), i)
		}
	}
	for _, rate := range []float64{1e300, math.MaxFloat64, 1e20, 1e12, MaxRate, 1e-300} {
		s := &schedule{start: t0, rate: rate}
		for _, d := range []time.Duration{1, time.Millisecond, time.Second, 100 * 365 * 24 * time.Hour, math.MaxInt64} {
			check(s, t0.Add(d), s.before(t0.Add(d)))
		}
	}
	s := &schedule{start: t0, rate: 1e300}
	if got := s.before(t0.Add(time.Second)); got != maxSlot {
		t.Fatalf("rate 1e300: %d due in the first second, want the cap %d", got, int64(maxSlot))
	}
	s = &schedule{start: t0, rate: 1e-300}
	if got := s.before(t0.Add(time.Hour)); got != 1 || !s.at(1).After(s.at(0)) || s.at(maxSlot).Before(s.at(1)) {
		t.Fatalf("rate 1e-300: %d due in the first hour, want 1; at(1) %v, at(maxSlot) %v", got, s.at(1), s.at(maxSlot))
	}
}

// openRun is a run as Run sets it up, with the schedule starting at t0.
func openRun(rate float64, warmup, duration time.Duration, requests int64) *run {
	r := &run{cfg: Config{Rate: rate, Requests: requests}, sched: &schedule{start: t0, rate: rate}, halt: make(chan struct{})}
	r.measureFrom = t0.Add(warmup)
	if duration > 0 {
		r.stopAt = r.measureFrom.Add(duration)
	}
	return r
}

// TestTakeOpenLoop: workers get consecutive slots whatever the time they ask, the
// warm-up's slots are not recorded, and the run ends at the first slot due at or
// after the end.
func TestTakeOpenLoop(t *testing.T) {
	r := openRun(1000, 3*time.Millisecond, 5*time.Millisecond, 0)
	var got []string
	for {
		tk := r.take(t0) // a worker that is never late
		if !tk.ok {
			break
		}
		got = append(got, fmt.Sprintf("%v/%v", tk.due.Sub(t0), tk.record))
	}
	want := "[0s/false 1ms/false 2ms/false 3ms/true 4ms/true 5ms/true 6ms/true 7ms/true]"
	if fmt.Sprint(got) != want {
		t.Fatalf("slots %v, want %v", got, want)
	}
	if r.issued.Load() != 5 {
		t.Fatalf("issued %d", r.issued.Load())
	}
}

// TestTakeLate: a late worker still gets the slot that is due next (in the past), so
// its latency counts from then; once the end has passed, nothing more starts.
func TestTakeLate(t *testing.T) {
	r := openRun(100, 0, time.Second, 0)
	late := t0.Add(500 * time.Millisecond)
	for i := range 3 {
		tk := r.take(late)
		if !tk.ok || !tk.record || tk.due != t0.Add(time.Duration(i)*10*time.Millisecond) {
			t.Fatalf("slot %d: %+v", i, tk)
		}
	}
	if tk := r.take(t0.Add(time.Second)); tk.ok {
		t.Fatalf("a slot after the end: %+v", tk)
	}
}

func TestTakeRequestsAndStop(t *testing.T) {
	r := openRun(1000, 0, 0, 3)
	n := 0
	for r.take(t0).ok {
		n++
	}
	if n != 3 {
		t.Fatalf("%d slots for 3 requests", n)
	}

	r = &run{cfg: Config{}, measureFrom: t0}
	if !r.take(t0).ok {
		t.Fatal("closed loop without bounds refused a request")
	}
	r.stopped.Store(true)
	if r.take(t0).ok {
		t.Fatal("a request after Stop")
	}
}

// testWorker is worker 0 of r with a recorder of its own.
func testWorker(r *run) *worker { return &worker{run: r, rec: newRecorder(r)} }

// TestRecordFromDue: in an open loop the latency counts from when the request was
// due, the service time from when it was sent; in a closed loop both from the send.
func TestRecordFromDue(t *testing.T) {
	f := func(open bool, wantLatency, wantService time.Duration) {
		t.Helper()
		r := &run{cfg: Config{Interval: time.Second}}
		if open {
			r.sched = &schedule{start: t0, rate: 1}
		}
		w := testWorker(r)
		tk := ticket{ok: true, record: true}
		if open {
			tk.due = t0
		}
		w.record(tk, t0.Add(30*time.Millisecond), t0.Add(32*time.Millisecond), 200, nil)
		if got := time.Duration(w.rec.hist.Max()) * time.Microsecond; got < wantLatency || got > wantLatency+wantLatency/100 {
			t.Fatalf("open %v: latency %v, want %v", open, got, wantLatency)
		}
		if open {
			if got := time.Duration(w.rec.service.Max()) * time.Microsecond; got < wantService || got > wantService+wantService/100 {
				t.Fatalf("service time %v, want %v", got, wantService)
			}
		}
		if w.rec.win.requests != 1 || w.rec.win.ok != 1 || w.rec.win.hist.TotalCount() != 1 {
			t.Fatalf("window %+v", w.rec.win)
		}
	}
	f(true, 32*time.Millisecond, 2*time.Millisecond)
	f(false, 2*time.Millisecond, 2*time.Millisecond)
}

// TestRunOpenLoop: a rate-bound run sends exactly the requests asked for, and its
// timeline accounts for every one of them.
func TestRunOpenLoop(t *testing.T) {
	s := startServer(t, nil)
	var samples int
	var seen Sample
	res, err := Run(Config{
		Addr: s.addr, Connections: 4, Rate: 2000, Requests: 100, Interval: 10 * time.Millisecond,
		Generate: func(worker int, seq uint64, r *Request) {
			Telemetry([]string{"/a"}, 1, 4, 0)(worker, seq, r)
			r.Kind = "telemetry"
		},
		OnSample: func(s Sample) { samples, seen = samples+1, s },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 100 || res.OK() != 100 || res.Missed != 0 || res.Latency.TotalCount() != 100 || res.Service.TotalCount() != 100 {
		t.Fatalf("result %v, missed %d", res, res.Missed)
	}
	if k := res.Kinds["telemetry"]; k == nil || k.Requests != 100 || k.Status[200] != 100 || k.Points != 100*PointsPerRow {
		t.Fatalf("kinds %+v", res.Kinds["telemetry"])
	}
	var sum, ok int64
	for _, smp := range res.Timeline {
		sum += smp.Requests
		ok += smp.OK
	}
	// OnSample saw every sample, and the last again if a short remainder was merged into it.
	last := res.Timeline[len(res.Timeline)-1]
	if sum != 100 || ok != 100 || last.TotalRequests != 100 || last.TotalFailed != 0 || seen != last ||
		samples < len(res.Timeline) || samples > len(res.Timeline)+1 {
		t.Fatalf("timeline sums to %d (%d ok), last %+v, %d samples seen of %d", sum, ok, last, samples, len(res.Timeline))
	}
	if last.At != res.Elapsed {
		t.Fatalf("the timeline ends at %v, the measured run at %v", last.At, res.Elapsed)
	}
}

// TestRunStop: closing Stop ends a run that nothing else would end soon.
func TestRunStop(t *testing.T) {
	s := startServer(t, func(ctx *fasthttp.RequestCtx) {})
	stop := make(chan struct{})
	close(stop)
	res, err := Run(Config{Addr: s.addr, Connections: 2, Duration: time.Hour, Rate: 10, Stop: stop,
		Generate: Telemetry([]string{"/"}, 1, 2, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.Missed < 0 {
		t.Fatalf("result %v, missed %d", res, res.Missed)
	}
}

func TestRunTransportErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	res, err := Run(Config{Addr: addr, Requests: 3, Timeout: time.Second, Generate: Telemetry([]string{"/"}, 1, 1, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if res.TransportErrors["connection refused"] != 3 || res.Failed() != 3 {
		t.Fatalf("transport errors %v, failed %d", res.TransportErrors, res.Failed())
	}
}

func TestClassify(t *testing.T) {
	f := func(err error, want string) {
		t.Helper()
		if got := Classify(err); got != want {
			t.Fatalf("Classify(%v) = %q, want %q", err, got, want)
		}
	}
	f(fasthttp.ErrTimeout, "timeout")
	f(fmt.Errorf("dial: %w", os.ErrDeadlineExceeded), "timeout")
	f(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, "connection refused")
	f(&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, "connection reset")
	f(fasthttp.ErrConnectionClosed, "connection closed")
	f(io.EOF, "connection closed")
	f(fasthttp.ErrNoFreeConns, "no free connection")
	f(&net.DNSError{Err: "no such host", Name: "x"}, "dns")
	f(errors.New("something else"), "other")
}

// TestRunTLS: with TLS the requests go over HTTPS.
func TestRunTLS(t *testing.T) {
	var seen atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			seen.Add(1)
		}
	}))
	t.Cleanup(srv.Close)
	res, err := Run(Config{Addr: srv.Listener.Addr().String(), TLS: true,
		TLSConfig: srv.Client().Transport.(*http.Transport).TLSClientConfig,
		Requests:  5, Generate: Telemetry([]string{"/"}, 1, 1, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status[200] != 5 || seen.Load() != 5 {
		t.Fatalf("result %v, %d over TLS", res, seen.Load())
	}
}

// TestMissed: requests due before the end that never started are missed; the end is
// the Stop when that came first, and a Requests bound caps what was due.
func TestMissed(t *testing.T) {
	f := func(warmup time.Duration, requests, issued int64, stoppedAt time.Duration, want int64) {
		t.Helper()
		r := openRun(1000, warmup, 10*time.Millisecond, requests)
		r.issued.Store(issued)
		end := r.stopAt.Add(time.Second) // late answers do not make more requests due
		if stoppedAt > 0 {
			r.stopped.Store(true)
			end = t0.Add(stoppedAt)
		}
		if from, to, _ := r.missedSlots(end); to-from != want {
			t.Fatalf("warm-up %v, requests %d, issued %d, stopped at %v: missed %d, want %d", warmup, requests, issued, stoppedAt, to-from, want)
		}
	}
	f(0, 0, 10, 0, 0)
	f(0, 0, 7, 0, 3)
	f(5*time.Millisecond, 0, 7, 0, 3) // 10 due after the warm-up
	f(0, 4, 3, 0, 1)
	f(0, 4, 9, 0, 0)
	f(0, 0, 2, 5*time.Millisecond, 3)
	f(0, 0, 2, time.Hour, 8)
	if from, to, _ := (&run{}).missedSlots(t0); to-from != 0 {
		t.Fatalf("closed loop: missed %d", to-from)
	}
}

// TestMissedRecorded: each missed request is in the latency histogram at the time
// from when it was due to the end it was missed by, so a stall at the end of a run
// shows in the percentiles; a Stop ends the schedule when it came, not when the
// last answer after it did.
func TestMissedRecorded(t *testing.T) {
	r := openRun(1000, 0, 10*time.Millisecond, 0)
	r.issued.Store(7) // slots 0-6 were sent; 7, 8 and 9 (due at 7, 8, 9 ms) were not
	h := newHistogram()
	if n := r.recordMissed(h, r.stopAt.Add(time.Second)); n != 3 {
		t.Fatalf("missed %d, want 3", n)
	}
	if h.TotalCount() != 3 || !h.ValuesAreEquivalent(h.Min(), 1000) || !h.ValuesAreEquivalent(h.Max(), 3000) {
		t.Fatalf("recorded %d, %d-%d µs; want 3 of 1000-3000", h.TotalCount(), h.Min(), h.Max())
	}

	r = openRun(1000, 0, 10*time.Millisecond, 0)
	r.issued.Store(2)
	r.stopped.Store(true)
	r.stoppedAt.Store(t0.Add(5 * time.Millisecond).UnixNano())
	h = newHistogram()
	if n := r.recordMissed(h, r.stopAt); n != 3 || !h.ValuesAreEquivalent(h.Max(), 3000) {
		t.Fatalf("stopped at 5 ms, answered until 10 ms: missed %d, longest %d µs; want 3, 3000", n, h.Max())
	}
}

// TestMissedRecordedInBulk: recording the missed requests in runs of equal
// values gives the very histogram that recording them one by one gave, and its
// cost does not grow with their number: an hour missed at MaxRate (3.6e10
// requests) is recorded (one by one it would take hours).
func TestMissedRecordedInBulk(t *testing.T) {
	for _, c := range []struct {
		rate     float64
		duration time.Duration
		issued   int64
	}{{1000, 10 * time.Millisecond, 7}, {100_000, 10 * time.Second, 1234}, {3, 2 * time.Hour, 5}, {7777.7, 3 * time.Second, 0}} {
		r := openRun(c.rate, 0, c.duration, 0)
		r.issued.Store(c.issued)
		end := r.stopAt.Add(1500 * time.Millisecond)
		bulk := newHistogram()
		n := r.recordMissed(bulk, end)
		from, to, until := r.missedSlots(end)
		one := newHistogram()
		for i := from; i < to; i++ {
			one.RecordValue(min(until.Sub(r.sched.at(i)), maxLatency).Microseconds())
		}
		if n != to-from || bulk.TotalCount() != n || !bulk.Equals(one) {
			t.Fatalf("rate %v for %v, %d issued: %d missed, bulk count %d max %d, one by one count %d max %d",
				c.rate, c.duration, c.issued, n, bulk.TotalCount(), bulk.Max(), one.TotalCount(), one.Max())
		}
	}
	r := openRun(MaxRate, 0, time.Hour, 0)
	h := newHistogram()
	if n := r.recordMissed(h, r.stopAt); n != 36_000_000_000 || h.TotalCount() != n || !h.ValuesAreEquivalent(h.Max(), time.Hour.Microseconds()) {
		t.Fatalf("an hour at MaxRate: %d missed, %d recorded, max %d µs", n, h.TotalCount(), h.Max())
	}
}

// TestRunMaxRate: a run at MaxRate ends with its Duration, however many
// requests it could not send, and counts every one of them missed.
func TestRunMaxRate(t *testing.T) {
	s := startServer(t, func(ctx *fasthttp.RequestCtx) {})
	res, err := Run(Config{Addr: s.addr, Connections: 2, Duration: 200 * time.Millisecond, Rate: MaxRate,
		Generate: Telemetry([]string{"/"}, 1, 2, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Missed <= 0 || res.MissedLatency.TotalCount() != res.Missed || res.Requests+res.Errors+res.Missed > 2_000_000 {
		t.Fatalf("%d answered, %d failed, %d missed (%d recorded)", res.Requests, res.Errors, res.Missed, res.MissedLatency.TotalCount())
	}
}

// TestRunStopWhileWaiting: a Stop wakes workers waiting for their next due time,
// and they send nothing after it.
func TestRunStopWhileWaiting(t *testing.T) {
	var served atomic.Int64
	s := startServer(t, func(ctx *fasthttp.RequestCtx) { served.Add(1) })
	stop := make(chan struct{})
	go func() {
		for served.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		close(stop)
	}()
	// At 1 request a second, slot 0 goes at once and the other 15 workers wait
	// 1-15 s for theirs.
	res, err := Run(Config{Addr: s.addr, Connections: 16, Duration: time.Hour, Rate: 1, Stop: stop,
		Generate: Telemetry([]string{"/"}, 1, 2, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests > 2 || served.Load() > 2 {
		t.Fatalf("%d requests answered, %d served after the Stop; want at most 2", res.Requests, served.Load())
	}
}

// TestMeasuredEnd: the measured run ends at the end of the Duration, at the Stop
// when it came first, or when Requests ran out at the later of the last send and
// the last answer (in an open loop not before the next slot); with a Duration,
// the answers after it are the drain, not the run.
func TestMeasuredEnd(t *testing.T) {
	f := func(name string, r *run, want time.Duration, wantKnown bool) {
		t.Helper()
		end, known := r.measuredEnd()
		if known != wantKnown || (known && end.Sub(t0) != want) {
			t.Fatalf("%s: end %v (known %v), want %v (%v)", name, end.Sub(t0), known, want, wantKnown)
		}
	}
	closed := func(warmup, duration time.Duration, requests int64) *run {
		r := &run{cfg: Config{Requests: requests}, measureFrom: t0.Add(warmup), halt: make(chan struct{})}
		if duration > 0 {
			r.stopAt = r.measureFrom.Add(duration)
		}
		return r
	}
	f("duration", closed(time.Second, 10*time.Second, 0), 11*time.Second, true)

	r := closed(0, 10*time.Second, 0)
	r.stop(t0.Add(4 * time.Second))
	f("stopped", r, 4*time.Second, true)
	r = closed(0, 10*time.Second, 0)
	r.stop(t0.Add(12 * time.Second)) // during the drain
	f("stopped after the end", r, 10*time.Second, true)
	r = closed(2*time.Second, 10*time.Second, 0)
	r.stop(t0.Add(time.Second))
	f("stopped in the warm-up", r, 2*time.Second, true)

	r = closed(0, 0, 100)
	r.issued.Store(99)
	r.sent(t0.Add(3 * time.Second))
	f("requests not yet out", r, 0, false)
	r.issued.Store(104) // workers that found none left count too
	r.sent(t0.Add(5 * time.Second))
	r.sent(t0.Add(4 * time.Second))
	f("requests out", r, 5*time.Second, true)
	r.stopAt = t0.Add(2 * time.Second)
	f("duration before requests", r, 2*time.Second, true)

	r = closed(0, 0, 2)
	r.count()
	r.count()
	r.sent(t0.Add(time.Millisecond))
	r.sent(t0.Add(2 * time.Millisecond))
	f("requests out, answers not in", r, 0, false)
	r.done(t0.Add(40 * time.Millisecond))
	r.done(t0.Add(30 * time.Millisecond))
	f("requests out and answered", r, 40*time.Millisecond, true)

	r = openRun(100, time.Second, 0, 50)
	r.issued.Store(50)
	r.sent(t0.Add(1490 * time.Millisecond)) // slot 149, on time
	f("open loop on time", r, 1500*time.Millisecond, true)
	r.sent(t0.Add(1700 * time.Millisecond))
	f("open loop late", r, 1700*time.Millisecond, true)
}

// TestRecordFailedApart: failed requests (not 2xx, or no answer) have their own
// latency histogram, so a fast error does not flatter the latency of the 2xx
// answers; the interval's histogram has the 2xx answers only.
func TestRecordFailedApart(t *testing.T) {
	r := &run{cfg: Config{Interval: time.Second}}
	w := testWorker(r)
	tk := ticket{ok: true, record: true}
	w.record(tk, t0, t0.Add(20*time.Millisecond), 200, nil)
	w.record(tk, t0, t0.Add(50*time.Microsecond), 503, nil)
	w.record(tk, t0, t0.Add(30*time.Microsecond), 0, errors.New("connection refused"))
	res := collect([]*recorder{w.rec})
	if res.Latency.TotalCount() != 1 || res.Latency.Min() < 19000 || res.FailedLatency.TotalCount() != 2 || res.FailedLatency.Max() > 100 {
		t.Fatalf("latency %d (min %d µs), failed %d (max %d µs)", res.Latency.TotalCount(), res.Latency.Min(),
			res.FailedLatency.TotalCount(), res.FailedLatency.Max())
	}
	if res.Service.TotalCount() != 1 || res.Requests != 2 || res.Errors != 1 || res.Failed() != 2 {
		t.Fatalf("service %d, result %v", res.Service.TotalCount(), res)
	}
	if w.rec.win.hist.TotalCount() != 1 || w.rec.win.requests != 2 || w.rec.win.errors != 1 {
		t.Fatalf("window %+v", w.rec.win)
	}
	// Collected: a request still in flight (an Abort) records nothing more.
	if w.record(tk, t0, t0.Add(time.Millisecond), 200, nil) || w.rec.requests != 2 {
		t.Fatal("recorded after collect")
	}
}

// TestBackoff: flat out, a worker waits after a request that got no answer (but
// not past the end of the run); an open loop keeps to its schedule then. After
// a 429 or 503 either loop waits, as long as Retry-After says within bounds.
func TestBackoff(t *testing.T) {
	refused := outcome{err: errors.New("connection refused")}
	r := &run{measureFrom: t0, stopAt: t0.Add(time.Minute)}
	if d := r.backoff(refused, t0); d != errorBackoff {
		t.Fatalf("closed loop after an error: %v", d)
	}
	if d := r.backoff(refused, t0.Add(time.Minute-time.Millisecond)); d != time.Millisecond {
		t.Fatalf("near the end: %v", d)
	}
	if d := r.backoff(refused, t0.Add(2*time.Minute)); d != 0 {
		t.Fatalf("after the end: %v", d)
	}
	if d := r.backoff(outcome{status: 200}, t0); d != 0 {
		t.Fatalf("without an error: %v", d)
	}
	if d := r.backoff(outcome{status: 500}, t0); d != 0 {
		t.Fatalf("after a 500: %v", d)
	}
	open := openRun(100, 0, time.Minute, 0)
	if d := open.backoff(refused, t0); d != 0 {
		t.Fatalf("open loop: %v", d)
	}
	for _, c := range []struct {
		o    outcome
		want time.Duration
	}{
		{outcome{status: 429}, errorBackoff},
		{outcome{status: 503}, errorBackoff},
		{outcome{status: 503, retryAfter: 2 * time.Second}, 2 * time.Second},
		{outcome{status: 429, retryAfter: time.Hour}, MaxRetryAfter},
		{outcome{status: 503, retryAfter: time.Millisecond}, errorBackoff}, // "0" does not mean hammer
	} {
		for name, r := range map[string]*run{"closed": r, "open": open} {
			if d := r.backoff(c.o, t0); d != c.want {
				t.Fatalf("%s loop after %+v: %v, want %v", name, c.o, d, c.want)
			}
		}
	}
	if d := r.backoff(outcome{status: 429, retryAfter: 5 * time.Second}, t0.Add(time.Minute-time.Second)); d != time.Second {
		t.Fatalf("Retry-After past the end: %v", d)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	f := func(v string, want time.Duration, wantOK bool) {
		t.Helper()
		if d, ok := RetryAfter(v, now); d != want || ok != wantOK {
			t.Fatalf("RetryAfter(%q) = %v, %v; want %v, %v", v, d, ok, want, wantOK)
		}
	}
	f("", 0, false)
	f("3", 3*time.Second, true)
	f(" 0 ", 0, true)
	f("-1", 0, false)
	f("soon", 0, false)
	f("Thu, 02 Jan 2025 03:04:12 GMT", 7*time.Second, true)
	f("Thu, 02 Jan 2025 03:00:00 GMT", 0, true) // past
	f("99999999999999999999", 0, false)         // overflows int64: not a number
	if d, ok := RetryAfter("9999999999999", now); !ok || d < MaxRetryAfter {
		t.Fatalf("huge: %v %v", d, ok)
	}
}

// TestRunThrottled: flat out, 503 answers with Retry-After are not re-sent at
// once: each connection waits (here 1 s, the smallest Retry-After), so a run of
// 300 ms sends one request per connection.
func TestRunThrottled(t *testing.T) {
	for _, header := range []string{"1", time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat)} {
		s := startServer(t, func(ctx *fasthttp.RequestCtx) {
			ctx.Response.Header.Set("Retry-After", header)
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		})
		start := time.Now()
		res, err := Run(Config{Addr: s.addr, Connections: 2, Duration: 300 * time.Millisecond,
			Generate: Telemetry([]string{"/"}, 1, 2, 0)})
		if err != nil {
			t.Fatal(err)
		}
		if n := s.calls.Load(); n != 2 || res.Status[503] != 2 || res.OK() != 0 || res.OKPerSec() != 0 {
			t.Fatalf("Retry-After %q: %d calls, result %v", header, n, res)
		}
		// The wait is cut at the end of the run.
		if d := time.Since(start); d > 900*time.Millisecond {
			t.Fatalf("Retry-After %q: the run took %v", header, d)
		}
	}
}

// TestRecorders: the recorders, and so the histograms, do not grow with the
// connections.
func TestRecorders(t *testing.T) {
	if n := recorders(2000); n < 1 || n > maxRecorders {
		t.Fatalf("%d recorders for 2000 connections", n)
	}
	if n := recorders(1); n != 1 {
		t.Fatalf("%d recorders for 1 connection", n)
	}
}

// TestRunDrain: requests in flight at the end of the Duration are waited for and
// counted, but the rates are over the Duration, not over the wait.
func TestRunDrain(t *testing.T) {
	// Every answer takes longer than the whole run: each worker sends one request.
	s := startServer(t, func(ctx *fasthttp.RequestCtx) { time.Sleep(200 * time.Millisecond) })
	res, err := Run(Config{Addr: s.addr, Connections: 2, Duration: 100 * time.Millisecond, Interval: 10 * time.Millisecond,
		Generate: Telemetry([]string{"/"}, 1, 2, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Elapsed != 100*time.Millisecond || res.Drain <= 0 || res.Requests < 1 || res.Requests > 2 || res.Aborted {
		t.Fatalf("elapsed %v, drain %v, result %v", res.Elapsed, res.Drain, res)
	}
	last := res.Timeline[len(res.Timeline)-1]
	if last.At != res.Elapsed || last.TotalRequests != res.Requests {
		t.Fatalf("timeline %+v", res.Timeline)
	}
}

// TestRunAbort: an Abort returns without the requests in flight, which a Stop
// would wait for.
func TestRunAbort(t *testing.T) {
	release := make(chan struct{})
	var hits atomic.Int64
	s := startServer(t, func(ctx *fasthttp.RequestCtx) { hits.Add(1); <-release })
	t.Cleanup(func() { close(release) }) // before the server's shutdown
	stop, abort := make(chan struct{}), make(chan struct{})
	go func() {
		for hits.Load() < 2 {
			time.Sleep(time.Millisecond)
		}
		close(stop)
		close(abort)
	}()
	res, err := Run(Config{Addr: s.addr, Connections: 2, Duration: time.Hour, Timeout: time.Hour, Interval: time.Hour,
		Stop: stop, Abort: abort, Generate: Telemetry([]string{"/"}, 1, 2, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Aborted || res.Requests != 0 || res.Errors != 0 {
		t.Fatalf("aborted %v, result %v", res.Aborted, res)
	}
}

// TestRunRequestsFewerThanConnections: with as many requests as connections,
// all are sent at once; the run ends with the last answer, so the rate is the
// requests over the time they took, not over the microseconds the sends took.
func TestRunRequestsFewerThanConnections(t *testing.T) {
	s := startServer(t, func(ctx *fasthttp.RequestCtx) { time.Sleep(50 * time.Millisecond) })
	res, err := Run(Config{Addr: s.addr, Connections: 4, Requests: 4, Generate: Telemetry([]string{"/"}, 1, 4, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 4 || res.Elapsed < 50*time.Millisecond || res.Drain > 10*time.Millisecond || res.ReqPerSec() > 80 {
		t.Fatalf("elapsed %v, drain %v, %.0f req/s, result %v", res.Elapsed, res.Drain, res.ReqPerSec(), res)
	}
}

// TestRunMissedApart: an open loop against a target that answers nothing 2xx
// has no 2xx latency; the missed requests are in MissedLatency, and in the
// percentiles that include them (Quantile), not in Latency.
func TestRunMissedApart(t *testing.T) {
	s := startServer(t, func(ctx *fasthttp.RequestCtx) {
		time.Sleep(150 * time.Millisecond)
		ctx.SetStatusCode(fasthttp.StatusInternalServerError)
	})
	res, err := Run(Config{Addr: s.addr, Connections: 1, Rate: 200, Duration: 100 * time.Millisecond,
		Generate: Telemetry([]string{"/"}, 1, 1, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() != 0 || res.Latency.TotalCount() != 0 || res.Missed < 10 || res.MissedLatency.TotalCount() != res.Missed {
		t.Fatalf("2xx latencies %d, missed %d (%d recorded), result %v", res.Latency.TotalCount(), res.Missed,
			res.MissedLatency.TotalCount(), res)
	}
	if res.LatencyInclMissed().TotalCount() != res.Missed || res.Max() <= 0 || res.Max() > 100*time.Millisecond {
		t.Fatalf("incl. missed: %d, max %v", res.LatencyInclMissed().TotalCount(), res.Max())
	}
	if res.Latency.TotalCount() != 0 { // LatencyInclMissed did not merge into Latency
		t.Fatal("Latency changed")
	}
}
