package loadtest

import (
	"errors"
	"testing"
	"time"
)

// timelineRun is a closed-loop run of 3 s from t0 sampled every second, with one
// recorder, a worker on it and a sampler that is driven by hand (no ticker).
func timelineRun() (*sampler, func(n int, status int, err error)) {
	r := &run{cfg: Config{Interval: time.Second, Duration: 3 * time.Second}, measureFrom: t0, stopAt: t0.Add(3 * time.Second)}
	rec := newRecorder(r)
	w := &worker{run: r, rec: rec}
	w.req.Points = 1
	answer := func(n int, status int, err error) {
		for range n {
			w.record(ticket{ok: true, record: true}, t0, t0.Add(2*time.Millisecond), status, err)
		}
	}
	return newSampler(r, []*recorder{rec}), answer
}

// TestSamplerTimeline: an interval without 2xx answers has no latency (not 0 ms),
// and the answers that come in after the end (the drain) go into the last
// interval, not into one of their own.
func TestSamplerTimeline(t *testing.T) {
	s, answer := timelineRun()
	answer(10, 200, nil)
	s.publish(s.take(t0.Add(time.Second)))
	answer(3, 503, nil)
	answer(1, 0, errors.New("refused"))
	s.publish(s.take(t0.Add(2 * time.Second)))
	answer(5, 200, nil)
	answer(3, 200, nil) // in flight at 3 s, answered after it
	s.finish(t0.Add(3 * time.Second))

	if len(s.samples) != 3 {
		t.Fatalf("%d samples: %+v", len(s.samples), s.samples)
	}
	first, failing, last := s.samples[0], s.samples[1], s.samples[2]
	if first.Latencies != 10 || first.P99 < 2*time.Millisecond || first.OK != 10 {
		t.Fatalf("first interval %+v", first)
	}
	if failing.Latencies != 0 || failing.P99 != 0 || failing.Requests != 3 || failing.Errors != 1 || failing.OK != 0 {
		t.Fatalf("interval of failures only %+v", failing)
	}
	if last.At != 3*time.Second || last.Span != time.Second || last.Requests != 8 || last.Latencies != 8 {
		t.Fatalf("last interval %+v", last)
	}
	if last.TotalRequests != 21 || last.TotalErrors != 1 || last.TotalFailed != 4 || last.TotalPoints != 18 {
		t.Fatalf("totals %+v", last)
	}
}

// TestSamplerMergesShortLast: a last interval shorter than half an interval is
// merged into the one before, latencies included, instead of being a sliver whose
// rate would spike.
func TestSamplerMergesShortLast(t *testing.T) {
	s, answer := timelineRun()
	answer(10, 200, nil)
	s.publish(s.take(t0.Add(time.Second)))
	answer(6, 200, nil)
	s.publish(s.take(t0.Add(2 * time.Second)))
	answer(4, 200, nil)
	s.finish(t0.Add(2*time.Second + time.Millisecond))

	if len(s.samples) != 2 {
		t.Fatalf("%d samples: %+v", len(s.samples), s.samples)
	}
	last := s.samples[1]
	if last.At != 2*time.Second+time.Millisecond || last.Span != time.Second+time.Millisecond ||
		last.Requests != 10 || last.OK != 10 || last.Points != 10 || last.Latencies != 10 || last.TotalRequests != 20 {
		t.Fatalf("merged interval %+v", last)
	}
	if rps := last.ReqPerSec(); rps > 10 {
		t.Fatalf("merged interval at %.1f req/s", rps)
	}

	// A run shorter than half an interval has one sample, however short.
	s, answer = timelineRun()
	answer(2, 200, nil)
	s.finish(t0.Add(time.Millisecond))
	if len(s.samples) != 1 || s.samples[0].Requests != 2 || s.samples[0].Span != time.Millisecond {
		t.Fatalf("short run: %+v", s.samples)
	}
}
