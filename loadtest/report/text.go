package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// WriteText writes the end-of-run summary for a terminal.
func (r *Report) WriteText(w io.Writer) {
	s := r.Summary
	drain := ""
	if s.showDrain() {
		drain = fmt.Sprintf(" (+%.1fs for answers in flight)", s.DrainSeconds)
	}
	fmt.Fprintf(w, "%s requests in %.1fs%s to %s: %s req/s (%s 2xx/s), %s points/s\n",
		Thousands(float64(s.Requests)), s.ElapsedSeconds, drain, r.Target, Rate(s.RequestsPerSec), Rate(s.OKPerSec), Rate(s.PointsPerSec))
	if s.Aborted {
		fmt.Fprintln(w, "  interrupted: the requests still in flight were not waited for and are not counted")
	}
	fmt.Fprintf(w, "  ok %s, failed %s (no answer %s)", Thousands(float64(s.OK)), Thousands(float64(s.Failed)), Thousands(float64(s.TransportErrors)))
	if r.Config.Rate > 0 {
		fmt.Fprintf(w, ", missed %s", Thousands(float64(s.Missed)))
	}
	fmt.Fprintln(w)
	// The percentiles are of the 2xx answers; failed requests have their own line,
	// so that fast errors do not pass for fast answers.
	from := "send"
	if r.Config.Rate > 0 {
		from = "due time"
	}
	type row struct {
		name string
		l    Latency
	}
	rows := []row{{"latency (2xx) from " + from, r.Latency}}
	if r.Config.Rate > 0 {
		rows = append(rows, row{"service time (2xx)", r.ServiceTime})
	}
	if l := r.LatencyInclMissed; l != nil && s.Missed > 0 {
		rows = append(rows, row{"latency incl. missed, from due time", *l})
	}
	if r.FailedLatency.Count > 0 {
		rows = append(rows, row{"latency of failed requests", r.FailedLatency})
	}
	width := 29
	for _, x := range rows {
		width = max(width, len(x.name)+2)
	}
	for _, x := range rows {
		if x.l.Count == 0 {
			fmt.Fprintf(w, "  %-*s none\n", width, x.name+":")
		} else {
			fmt.Fprintf(w, "  %-*s %s\n", width, x.name+":", x.l)
		}
	}
	if len(r.Status) > 0 {
		fmt.Fprintf(w, "  status: %s\n", counts(r.Status))
	}
	if len(r.TransportErrors) > 0 {
		fmt.Fprintf(w, "  no answer: %s (first: %s)\n", counts(r.TransportErrors), r.FirstError)
	}
	for _, name := range sortedKeys(r.Kinds) {
		k := r.Kinds[name]
		fmt.Fprintf(w, "  %s: %s requests, ok %s, status %s", name, Thousands(float64(k.Requests)), Thousands(float64(k.OK)), counts(k.Status))
		if k.TransportErrors > 0 {
			fmt.Fprintf(w, ", no answer %d", k.TransportErrors)
		}
		fmt.Fprintln(w)
	}
	if c := r.RPC; c != nil {
		fmt.Fprintf(w, "  rpc: %d pollers, %d polls, %d delivered, %d replies, %d empty, %d failed, status %s",
			c.Pollers, c.Polls, c.Delivered, c.Replies, c.Empty, c.Failed, counts(c.Status))
		if len(c.TransportErrors) > 0 {
			fmt.Fprintf(w, ", no answer %s", counts(c.TransportErrors))
		}
		fmt.Fprintln(w)
		if c.FirstPollsCut > 0 {
			fmt.Fprintf(w, "  rpc: interrupted: the first polls of %d pollers were cut off and are not counted\n", c.FirstPollsCut)
		}
	}
}

// showDrain tells whether the wait for the answers in flight is worth a
// mention: not below 0.05 s (it would read 0.0 s), nor when a second
// interruption ended it (those answers were not waited for).
func (s Summary) showDrain() bool { return s.DrainSeconds >= 0.05 && !s.Aborted }

// String is the percentiles on one line.
func (l Latency) String() string {
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  p99.9 %s  max %s",
		Millis(l.P50), Millis(l.P90), Millis(l.P99), Millis(l.P999), Millis(l.Max))
}

// Millis formats milliseconds with three significant digits: 0.123ms, 12.3ms, 1234ms.
func Millis(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0fms", v)
	case v >= 10:
		return fmt.Sprintf("%.1fms", v)
	case v >= 1:
		return fmt.Sprintf("%.2fms", v)
	default:
		return fmt.Sprintf("%.3fms", v)
	}
}

// Rate formats a rate (per second): with comma separators from 10 up (1,234),
// with three significant digits below (0.5, 2.35, 0.0123), so that a slow run
// does not read as 0.
func Rate(v float64) string {
	if v >= 10 || v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return Thousands(v)
	}
	decimals := min(max(2-int(math.Floor(math.Log10(v))), 0), 6)
	return trimZeros(strconv.FormatFloat(v, 'f', decimals, 64))
}

// counts formats "200 1,234, 503 5" in key order.
func counts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+" "+Thousands(float64(m[k])))
	}
	return strings.Join(parts, ", ")
}

// Thousands formats v rounded to an integer with comma separators: 1,234,567.
func Thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
