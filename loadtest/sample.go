package loadtest

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Sample is one interval of a run's timeline.
type Sample struct {
	// At is the end of the interval, from the end of the warm-up; Span its length.
	At, Span time.Duration
	// Requests answered in the interval (any status), of them OK 2xx; Errors not
	// answered; Points of the 2xx answers. The last interval also holds the
	// answers that came after the end of the run (Result.Drain).
	Requests, OK, Errors, Points int64
	// Latency of the 2xx answers that ended in the interval; Latencies is how many
	// there were. With none, P50 … Max are 0 and mean nothing: no data, not 0 ms.
	P50, P90, P99, Max time.Duration
	Latencies          int64
	// Totals since the warm-up ended, for a progress line: TotalRequests answered,
	// TotalErrors not answered, TotalFailed not answered or not 2xx; TotalP99 of
	// the 2xx answers (0 with none yet).
	TotalRequests, TotalErrors, TotalFailed, TotalPoints int64
	TotalP99                                             time.Duration
}

// ReqPerSec is the interval's requests per second, answered or not.
func (s Sample) ReqPerSec() float64 { return perSec(s.Requests+s.Errors, s.Span) }

// window is what a recorder recorded since the sampler last looked.
type window struct {
	requests, ok, errors, points int64
	hist                         *hdrhistogram.Histogram // 2xx answers
}

func (w *window) add(lat int64, ok, failed bool, points int64) {
	if ok {
		w.hist.RecordValue(lat)
	}
	if failed {
		w.errors++
		return
	}
	w.requests++
	w.points += points
	if ok {
		w.ok++
	}
}

// sampler collects the recorders' windows once per Config.Interval.
type sampler struct {
	run  *run
	recs []*recorder
	quit chan time.Time
	done chan []Sample

	last time.Time
	// cur is the interval being taken, prev the one before it (kept to merge a
	// short last interval into), all every interval so far.
	cur, prev, all *hdrhistogram.Histogram
	total          Sample
	samples        []Sample
}

func newSampler(r *run, recs []*recorder) *sampler {
	return &sampler{run: r, recs: recs, quit: make(chan time.Time), done: make(chan []Sample, 1),
		last: r.measureFrom, cur: newHistogram(), prev: newHistogram(), all: newHistogram()}
}

// loop takes a sample at every interval boundary after the warm-up until the
// measured run ends; stop takes the last one.
func (s *sampler) loop() {
	every := s.run.cfg.Interval
	first := time.NewTimer(time.Until(s.run.measureFrom.Add(every)))
	defer first.Stop()
	var tick <-chan time.Time = first.C
	var ticker *time.Ticker
	for {
		select {
		case now := <-tick:
			if ticker == nil {
				ticker = time.NewTicker(every)
				defer ticker.Stop()
				tick = ticker.C
			}
			// Past the end only answers to requests in flight come in: they go
			// into the last interval, which stop takes, not into intervals of
			// their own that would show the run winding down as a drop.
			if end, ok := s.run.measuredEnd(); ok && !now.Before(end) {
				continue
			}
			s.publish(s.take(now))
		case end := <-s.quit:
			s.finish(end)
			s.done <- s.samples
			return
		}
	}
}

// stop takes the last sample, up to end (the end of the measured run), with
// every answer recorded until now, and returns the timeline.
func (s *sampler) stop(end time.Time) []Sample {
	s.quit <- end
	return <-s.done
}

// take collects the windows into a sample of the interval from the last one to
// now and appends it. Its latencies end up in prev; cur then holds those of the
// interval before it.
func (s *sampler) take(now time.Time) Sample {
	s.cur.Reset()
	smp := Sample{At: now.Sub(s.run.measureFrom), Span: now.Sub(s.last)}
	for _, rec := range s.recs {
		rec.mu.Lock()
		smp.Requests += rec.win.requests
		smp.OK += rec.win.ok
		smp.Errors += rec.win.errors
		smp.Points += rec.win.points
		s.cur.Merge(rec.win.hist)
		rec.win.hist.Reset()
		rec.win.requests, rec.win.ok, rec.win.errors, rec.win.points = 0, 0, 0, 0
		rec.mu.Unlock()
	}
	s.last = now
	s.all.Merge(s.cur)
	s.total.TotalRequests += smp.Requests
	s.total.TotalErrors += smp.Errors
	s.total.TotalFailed += smp.Requests - smp.OK + smp.Errors
	s.total.TotalPoints += smp.Points
	smp.latencies(s.cur)
	s.samples = append(s.samples, smp)
	s.cur, s.prev = s.prev, s.cur
	return smp
}

// finish takes the last sample at end. A last interval shorter than half an
// interval is merged into the one before: a sliver of a millisecond holding the
// answers of the requests in flight at the end would plot as a spike of
// thousands of requests per second.
func (s *sampler) finish(end time.Time) {
	if len(s.samples) == 0 {
		if end.After(s.last) {
			s.publish(s.take(end))
		}
		return
	}
	if end.Sub(s.last) >= s.run.cfg.Interval/2 {
		s.publish(s.take(end))
		return
	}
	before := s.samples[len(s.samples)-1]
	smp := s.take(end) // now prev holds the latencies of smp, cur those of before
	s.samples = s.samples[:len(s.samples)-1]
	s.cur.Merge(s.prev)

	start := before.At - before.Span
	smp.At = max(end.Sub(s.run.measureFrom), start)
	smp.Span = smp.At - start
	smp.Requests += before.Requests
	smp.OK += before.OK
	smp.Errors += before.Errors
	smp.Points += before.Points
	smp.latencies(s.cur)
	s.samples[len(s.samples)-1] = smp
	s.publish(smp)
}

// publish completes smp with the totals so far and shows it to OnSample.
func (s *sampler) publish(smp Sample) {
	smp.TotalRequests, smp.TotalErrors, smp.TotalFailed, smp.TotalPoints =
		s.total.TotalRequests, s.total.TotalErrors, s.total.TotalFailed, s.total.TotalPoints
	smp.TotalP99 = quantile(s.all, 99)
	s.samples[len(s.samples)-1] = smp
	if s.run.cfg.OnSample != nil {
		s.run.cfg.OnSample(smp)
	}
}

// latencies sets the percentiles of the interval from h.
func (smp *Sample) latencies(h *hdrhistogram.Histogram) {
	smp.Latencies = h.TotalCount()
	smp.P50, smp.P90, smp.P99 = quantile(h, 50), quantile(h, 90), quantile(h, 99)
	smp.Max = time.Duration(h.Max()) * time.Microsecond
}

func quantile(h *hdrhistogram.Histogram, q float64) time.Duration {
	return time.Duration(h.ValueAtQuantile(q)) * time.Microsecond
}
