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
	// answered; Points of the 2xx answers.
	Requests, OK, Errors, Points int64
	// Latency of the requests that ended in the interval.
	P50, P90, P99, Max time.Duration
	// Totals since the warm-up ended, for a progress line: TotalRequests answered,
	// TotalErrors not answered, TotalFailed not answered or not 2xx.
	TotalRequests, TotalErrors, TotalFailed, TotalPoints int64
	TotalP99                                             time.Duration
}

// ReqPerSec is the interval's requests per second, answered or not.
func (s Sample) ReqPerSec() float64 { return perSec(s.Requests+s.Errors, s.Span) }

// window is what a worker recorded since the sampler last looked.
type window struct {
	requests, ok, errors, points int64
	hist                         *hdrhistogram.Histogram
}

func (w *window) add(lat int64, ok, failed bool, points int64) {
	w.hist.RecordValue(lat)
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

// sampler collects the workers' windows once per Config.Interval.
type sampler struct {
	run     *run
	workers []*worker
	quit    chan time.Time
	done    chan []Sample

	last          time.Time
	interval, all *hdrhistogram.Histogram
	total         Sample
	samples       []Sample
}

func newSampler(r *run, workers []*worker) *sampler {
	return &sampler{run: r, workers: workers, quit: make(chan time.Time), done: make(chan []Sample, 1),
		last: r.measureFrom, interval: newHistogram(), all: newHistogram()}
}

// loop takes a sample at every interval boundary after the warm-up until stop.
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
			s.take(now)
		case end := <-s.quit:
			if end.After(s.last) {
				s.take(end)
			}
			s.done <- s.samples
			return
		}
	}
}

// stop takes the last sample at end and returns the timeline.
func (s *sampler) stop(end time.Time) []Sample {
	s.quit <- end
	return <-s.done
}

func (s *sampler) take(now time.Time) {
	s.interval.Reset()
	smp := Sample{At: now.Sub(s.run.measureFrom), Span: now.Sub(s.last)}
	for _, w := range s.workers {
		w.mu.Lock()
		smp.Requests += w.win.requests
		smp.OK += w.win.ok
		smp.Errors += w.win.errors
		smp.Points += w.win.points
		s.interval.Merge(w.win.hist)
		w.win.hist.Reset()
		w.win.requests, w.win.ok, w.win.errors, w.win.points = 0, 0, 0, 0
		w.mu.Unlock()
	}
	s.last = now
	s.all.Merge(s.interval)
	smp.P50, smp.P90, smp.P99 = quantile(s.interval, 50), quantile(s.interval, 90), quantile(s.interval, 99)
	smp.Max = time.Duration(s.interval.Max()) * time.Microsecond
	s.total.TotalRequests += smp.Requests
	s.total.TotalErrors += smp.Errors
	s.total.TotalFailed += smp.Requests - smp.OK + smp.Errors
	s.total.TotalPoints += smp.Points
	smp.TotalRequests, smp.TotalErrors, smp.TotalFailed, smp.TotalPoints =
		s.total.TotalRequests, s.total.TotalErrors, s.total.TotalFailed, s.total.TotalPoints
	smp.TotalP99 = quantile(s.all, 99)
	s.samples = append(s.samples, smp)
	if s.run.cfg.OnSample != nil {
		s.run.cfg.OnSample(smp)
	}
}

func quantile(h *hdrhistogram.Histogram, q float64) time.Duration {
	return time.Duration(h.ValueAtQuantile(q)) * time.Microsecond
}
