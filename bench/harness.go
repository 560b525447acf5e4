package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-iot/sluice/loadtest"
)

// Payload is one request shape of the harness: Rows timestamped rows of
// loadtest.PointsPerRow values (loadtest.AppendTelemetry).
type Payload struct {
	Name string
	Rows int
}

// Payloads are the shapes every target gets: one row as the object
// {"ts","values"}, and a gateway's batch of 100 rows [{"ts","values"},…].
var Payloads = []Payload{{"single", 1}, {"batch100", 100}}

// Options size a harness run.
type Options struct {
	// Connections is the concurrency of every cell: the closed loop's workers, and
	// in an open loop the most requests in flight at once.
	Connections int
	// Rate, when above 0, runs every cell open loop at that many requests per
	// second (loadtest.Config.Rate): latency counts from when each request was due,
	// so a stalled target is not hidden by the generator waiting for it.
	Rate float64
	// HalfPeak runs every cell twice: closed loop flat out (its req/s is the peak),
	// then open loop at half that rate. Rate is ignored.
	HalfPeak bool
	// Duration and Warmup of every cell; Requests, when set, bounds a cell by count
	// as well (the smoke test uses it).
	Duration, Warmup time.Duration
	Requests         int64
	// Devices > 1 has Sluice take telemetry for that many devices (worker w posts as
	// device w % Devices) instead of the demo device alone.
	Devices int
	// ClickHouseAddr and RedisAddr, both set, add Sluice on the production back ends.
	ClickHouseAddr, RedisAddr string
	// Only and OnlyPayload, when set, run just the targets and payloads whose names
	// contain them.
	Only, OnlyPayload string
	// Log receives progress and one line per cell (nil: discarded).
	Log io.Writer
	// NodeLog is the Sluice nodes' logger (nil: discarded), to see their warnings
	// (a write stall, a failed delivery) beside the cell they happened in.
	NodeLog *slog.Logger
}

// Cell is the measurement of one target under one payload.
type Cell struct {
	Target  string
	Sluice  bool
	Payload string
	// Rate is the offered open-loop rate in req/s; 0 for a closed loop.
	Rate float64
	// Peak, in a half-peak open-loop cell, is the closed-loop req/s it halved.
	Peak   float64
	Result *loadtest.Result
	// GCs and Alloc are the Go GC cycles and bytes allocated by the whole process
	// (target and load generator) over the cell, warm-up included: the generator's
	// share is the same for every target, so a Sluice cell far above the ceiling's
	// points at allocation in Sluice (sluice-bench -memprofile says where).
	GCs   uint32
	Alloc uint64
	// Spooled is the rows a Sluice node on ClickHouse still held in its spool when
	// the cell ended (-1 without a spool): a backlog that grows from cell to cell
	// means the offered rate is above what ClickHouse takes in.
	Spooled int64
	// Delivered is the rows the spool delivered to ClickHouse over the cell,
	// warm-up included, and Elapsed that stretch: ClickHouse's intake.
	Delivered int64
	Elapsed   time.Duration
}

type starter struct {
	name  string
	start func() (*Target, error)
}

// Run measures every target under every payload, one target running at a time,
// and returns the cells in order.
func Run(opts Options) ([]Cell, error) {
	log := opts.Log
	if log == nil {
		log = io.Discard
	}
	starters := []starter{
		{"ceiling", StartCeiling},
		{"baseline", StartBaseline},
		{"sluice embedded", func() (*Target, error) { return StartSluice(opts.Devices, opts.NodeLog) }},
	}
	if opts.ClickHouseAddr != "" && opts.RedisAddr != "" {
		starters = append(starters, starter{"sluice clickhouse+redis", func() (*Target, error) {
			return StartSluiceProduction(opts.ClickHouseAddr, opts.RedisAddr, opts.Devices, opts.NodeLog)
		}})
	} else {
		fmt.Fprintln(log, "note: CLICKHOUSE_ADDR or REDIS_ADDR is unset: skipping Sluice on ClickHouse+Redis (eval \"$(scripts/services.sh)\" to include it)")
	}
	var cells []Cell
	runs := 0 // load runs so far, each with its own timestamps
	for _, s := range starters {
		if opts.Only != "" && !strings.Contains(s.name, opts.Only) {
			continue
		}
		t, err := s.start()
		if err != nil {
			return cells, fmt.Errorf("cannot start %s: %w", s.name, err)
		}
		fmt.Fprintf(log, "%s on %s\n", t.Name, t.Addr)
		for _, p := range Payloads {
			if opts.OnlyPayload != "" && !strings.Contains(p.Name, opts.OnlyPayload) {
				continue
			}
			cell := Cell{Target: t.Name, Sluice: t.Sluice, Payload: p.Name, Rate: opts.Rate}
			if opts.HalfPeak {
				cell.Rate = 0
			}
			res, err := measure(t, p, opts, cell.Rate, runs, &cell)
			runs++
			if err != nil {
				return cells, errors.Join(err, t.Close())
			}
			cell.Result = res
			logCell(log, cell)
			cells = append(cells, cell)
			if !opts.HalfPeak {
				continue
			}
			half := Cell{Target: t.Name, Sluice: t.Sluice, Payload: p.Name, Rate: res.ReqPerSec() / 2, Peak: res.ReqPerSec()}
			if half.Rate <= 0 {
				return cells, errors.Join(fmt.Errorf("%s %s: no requests answered at the peak", t.Name, p.Name), t.Close())
			}
			if half.Result, err = measure(t, p, opts, half.Rate, runs, &half); err != nil {
				return cells, errors.Join(err, t.Close())
			}
			runs++
			logCell(log, half)
			cells = append(cells, half)
		}
		if err := t.Close(); err != nil {
			return cells, fmt.Errorf("cannot stop %s: %w", t.Name, err)
		}
	}
	return cells, nil
}

// measure runs one load of payload p against t: closed loop, or open loop at rate
// req/s. Run number n gets its own stretch of timestamps (about 115 days), so no
// point of one run replaces a point of another on the same device. It records the
// run's GC cycles and allocated bytes in c.
func measure(t *Target, p Payload, opts Options, rate float64, n int, c *Cell) (*loadtest.Result, error) {
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() + int64(n)*10_000_000_000
	runtime.GC() // start every run with the previous one's garbage collected
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var delivered int64
	if t.Sluice {
		delivered = metric(t.Addr, "sluice_spool_delivered_rows_total")
	}
	start := time.Now()
	res, err := loadtest.Run(loadtest.Config{
		Addr: t.Addr, Connections: opts.Connections, Rate: rate,
		Duration: opts.Duration, Warmup: opts.Warmup, Requests: opts.Requests,
		Generate: loadtest.Telemetry(t.Paths, p.Rows, max(opts.Connections, 1), base),
	})
	runtime.ReadMemStats(&after)
	c.GCs, c.Alloc = after.NumGC-before.NumGC, after.TotalAlloc-before.TotalAlloc
	c.Spooled = -1
	if t.Sluice {
		c.Spooled = metric(t.Addr, "sluice_spool_rows")
		if d := metric(t.Addr, "sluice_spool_delivered_rows_total"); d >= 0 && delivered >= 0 {
			c.Delivered, c.Elapsed = d-delivered, time.Since(start)
		}
	}
	return res, err
}

// metric reads a metric without labels off the node's /metrics; -1 when it is
// not there (no spool) or cannot be read.
func metric(addr, name string) int64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			if n, err := strconv.ParseFloat(v, 64); err == nil {
				return int64(n)
			}
		}
	}
	return -1
}

func logCell(log io.Writer, c Cell) {
	res := c.Result
	mode := "closed"
	if c.Rate > 0 {
		mode = fmt.Sprintf("open %.0f/s", c.Rate)
	}
	fmt.Fprintf(log, "  %-8s %-14s %v\n", c.Payload, mode, res)
	fmt.Fprintf(log, "  %-8s %-14s process, warm-up included: %d GC cycles, %.0f MB allocated\n", "", "", c.GCs, float64(c.Alloc)/1e6)
	if c.Spooled >= 0 {
		fmt.Fprintf(log, "  %-8s %-14s spool: %d rows not yet in ClickHouse at the end; ClickHouse took in %d rows in %.1f s (%.0f rows/s)\n",
			"", "", c.Spooled, c.Delivered, c.Elapsed.Seconds(), float64(c.Delivered)/max(c.Elapsed.Seconds(), 1e-9))
	}
	if res.Missed > 0 {
		fmt.Fprintf(log, "  missed: %d requests came due with every connection busy\n", res.Missed)
	}
	if res.FirstErr != nil {
		fmt.Fprintf(log, "  first error: %v\n", res.FirstErr)
	}
}

// WriteTable writes the closed-loop cells as a Markdown table; Sluice rows carry
// their req/s as a fraction of the ceiling's and the baseline's for the same
// payload. Open-loop cells, if any, follow in a second table (WriteOpenTable).
func WriteTable(w io.Writer, cells []Cell) {
	ref := func(prefix, payload string) *loadtest.Result {
		for _, c := range cells {
			if !c.Sluice && c.Rate == 0 && strings.HasPrefix(c.Target, prefix) && c.Payload == payload {
				return c.Result
			}
		}
		return nil
	}
	ratio := func(r, of *loadtest.Result) string {
		if of == nil || of.ReqPerSec() == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", r.ReqPerSec()/of.ReqPerSec())
	}
	var open []Cell
	fmt.Fprintln(w, "| target | payload | req/s | points/s | p50 | p99 | p99.9 | max | not 2xx | Sluice/ceiling | Sluice/baseline |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, c := range cells {
		if c.Rate > 0 {
			open = append(open, c)
			continue
		}
		r := c.Result
		vsCeiling, vsBaseline := "", ""
		if c.Sluice {
			vsCeiling, vsBaseline = ratio(r, ref("ceiling", c.Payload)), ratio(r, ref("baseline", c.Payload))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %v | %v | %v | %v | %d | %s | %s |\n",
			c.Target, c.Payload, thousands(r.ReqPerSec()), thousands(r.PointsPerSec()),
			round(r.Quantile(50)), round(r.Quantile(99)), round(r.Quantile(99.9)), round(r.Max()),
			r.Failed(), vsCeiling, vsBaseline)
	}
	if len(open) > 0 {
		fmt.Fprintln(w)
		WriteOpenTable(w, open)
	}
}

// WriteOpenTable writes open-loop cells as a Markdown table. Latency counts from
// when each request was due; "from send" is the p99 from the actual send, and
// "missed" the requests that came due while every connection was busy. Either far
// from the other columns means the target (or -connections) did not keep up.
func WriteOpenTable(w io.Writer, cells []Cell) {
	fmt.Fprintln(w, "| target | payload | offered req/s | of peak | answered req/s | points/s | p50 | p99 | p99.9 | max | p99 from send | missed | not 2xx |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, c := range cells {
		r := c.Result
		ofPeak := "–"
		if c.Peak > 0 {
			ofPeak = fmt.Sprintf("%.2f", c.Rate/c.Peak)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %v | %v | %v | %v | %v | %d | %d |\n",
			c.Target, c.Payload, thousands(c.Rate), ofPeak, thousands(r.ReqPerSec()), thousands(r.PointsPerSec()),
			round(r.Quantile(50)), round(r.Quantile(99)), round(r.Quantile(99.9)), round(r.Max()),
			round(time.Duration(r.Service.ValueAtQuantile(99))*time.Microsecond), r.Missed, r.Failed())
	}
}

// round keeps three significant digits of a latency.
func round(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// thousands formats a rate as an integer with comma separators: 1,234,567.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
