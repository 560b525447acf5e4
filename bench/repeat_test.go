package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluice-iot/sluice/loadtest"
)

// cellWith is a cell of n requests in 1 s whose latencies are all d.
func cellWith(target string, rate float64, n int64, d time.Duration) Cell {
	h := hdrhistogram.New(1, 60_000_000, 3)
	h.RecordValues(d.Microseconds(), n)
	c := Cell{Target: target, Payload: "batch100", Rate: rate,
		Result: &loadtest.Result{Requests: n, Elapsed: time.Second, Latency: h, Service: h}}
	if rate > 0 {
		c.Peak = 2 * rate
	}
	return c
}

func TestWriteRepeatSummary(t *testing.T) {
	var runs [][]Cell
	for i, d := range []time.Duration{8 * time.Millisecond, 31 * time.Millisecond, 19 * time.Millisecond} {
		runs = append(runs, []Cell{
			cellWith("sluice embedded", 0, int64(1000*(i+1)), 5*time.Millisecond),
			cellWith("sluice embedded", 500, 500, d),
		})
	}
	var b strings.Builder
	WriteRepeatSummary(&b, runs)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header, a rule and two rows:\n%s", b.String())
	}
	for _, want := range []string{
		"| sluice embedded | batch100 | closed | 3 | 2,000 (1,000-3,000) | 5ms (5ms-5ms) | 5ms, 5ms, 5ms | 3 of 3 |",
		"| sluice embedded | batch100 | open, half of peak | 3 | 500 (500-500) | 19ms (8ms-31ms) | 8ms, 31ms, 19ms | 2 of 3 |",
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("missing row %s in:\n%s", want, b.String())
		}
	}
	if got := median([]float64{1, 2, 3, 10}); got != 2.5 {
		t.Fatalf("median of an even count: %v", got)
	}
}
