package loadtest

import (
	"errors"
	"fmt"
	"io"
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

// openRun is a run as Run sets it up, with the schedule starting at t0.
func openRun(rate float64, warmup, duration time.Duration, requests int64) *run {
	r := &run{cfg: Config{Rate: rate, Requests: requests}, sched: &schedule{start: t0, rate: rate}}
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

// TestRecordFromDue: in an open loop the latency counts from when the request was
// due, the service time from when it was sent; in a closed loop both from the send.
func TestRecordFromDue(t *testing.T) {
	f := func(open bool, wantLatency, wantService time.Duration) {
		t.Helper()
		r := &run{cfg: Config{Interval: time.Second}}
		if open {
			r.sched = &schedule{start: t0, rate: 1}
		}
		w := newWorker(r, 0)
		tk := ticket{ok: true, record: true}
		if open {
			tk.due = t0
		}
		w.record(tk, t0.Add(30*time.Millisecond), t0.Add(32*time.Millisecond), 200, nil)
		if got := time.Duration(w.hist.Max()) * time.Microsecond; got < wantLatency || got > wantLatency+wantLatency/100 {
			t.Fatalf("open %v: latency %v, want %v", open, got, wantLatency)
		}
		if open {
			if got := time.Duration(w.service.Max()) * time.Microsecond; got < wantService || got > wantService+wantService/100 {
				t.Fatalf("service time %v, want %v", got, wantService)
			}
		}
		if w.win.requests != 1 || w.win.ok != 1 || w.win.hist.TotalCount() != 1 {
			t.Fatalf("window %+v", w.win)
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
	res, err := Run(Config{
		Addr: s.addr, Connections: 4, Rate: 2000, Requests: 100, Interval: 10 * time.Millisecond,
		Generate: func(worker int, seq uint64, r *Request) {
			Telemetry([]string{"/a"}, 1, 4, 0)(worker, seq, r)
			r.Kind = "telemetry"
		},
		OnSample: func(Sample) { samples++ },
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
	last := res.Timeline[len(res.Timeline)-1]
	if sum != 100 || ok != 100 || last.TotalRequests != 100 || last.TotalFailed != 0 || samples != len(res.Timeline) {
		t.Fatalf("timeline sums to %d (%d ok), last %+v, %d samples seen of %d", sum, ok, last, samples, len(res.Timeline))
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
