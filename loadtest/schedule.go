package loadtest

import (
	"math"
	"sync/atomic"
	"time"
)

// schedule is the timetable of an open-loop run: request i (over all workers) is
// due at start + i/rate. Workers take the next index from it; the times do not
// depend on when the target answers, which is what makes the loop open.
type schedule struct {
	start time.Time
	rate  float64 // requests per second, > 0
	next  atomic.Int64
}

// at is when request i is due.
func (s *schedule) at(i int64) time.Time {
	return s.start.Add(time.Duration(float64(i) * float64(time.Second) / s.rate))
}

// before is the number of requests due before t: the least i with at(i) >= t.
func (s *schedule) before(t time.Time) int64 {
	if !t.After(s.start) {
		return 0
	}
	i := int64(math.Ceil(t.Sub(s.start).Seconds() * s.rate))
	// The float estimate may be one off at a boundary; at() decides.
	for i > 0 && !s.at(i-1).Before(t) {
		i--
	}
	for s.at(i).Before(t) {
		i++
	}
	return i
}
