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

// maxSlot bounds the request indices before returns: far beyond any run (at
// MaxRate it is over 14,000 years of requests), and half of math.MaxInt64, so
// that adding two of them cannot overflow.
const maxSlot = 1 << 62

// at is when request i is due. An offset beyond what a time.Duration holds (a
// rate far below any real one) is cut to the longest Duration, so that at stays
// monotonic in i: converting a float above math.MaxInt64 to int64 is not.
func (s *schedule) at(i int64) time.Time {
	d := float64(i) * float64(time.Second) / s.rate
	if !(d < math.MaxInt64) {
		return s.start.Add(math.MaxInt64)
	}
	return s.start.Add(time.Duration(d))
}

// before is the number of requests due before t: the least i with at(i) >= t,
// at most maxSlot. The float estimate is clamped before its conversion to
// int64 (a huge rate would overflow it), and is usually right or one off at a
// boundary, which at() decides in a step or two; when it is further off (a rate
// so high that many requests share a nanosecond of at()), a binary search finds
// the answer in at most 62 steps. So before never loops long, whatever the rate.
func (s *schedule) before(t time.Time) int64 {
	if !t.After(s.start) {
		return 0
	}
	x := math.Ceil(t.Sub(s.start).Seconds() * s.rate)
	i := int64(maxSlot)
	if x < maxSlot { // false for NaN too
		i = int64(max(x, 0))
	}
	due := func(i int64) bool { return !s.at(i).Before(t) } // request i is due at or after t
	// The common case: i is the answer, or one off.
	for _, c := range []int64{i, i - 1, i + 1} {
		if c >= 0 && c <= maxSlot && due(c) && (c == 0 || !due(c-1)) {
			return c
		}
	}
	if i == maxSlot && !due(maxSlot) {
		return maxSlot
	}
	// Binary search over [lo, hi]: due(hi) holds (or hi is maxSlot), the answer is in it.
	lo, hi := int64(0), int64(maxSlot)
	if due(i) {
		hi = i
	} else {
		lo = i + 1
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if due(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
