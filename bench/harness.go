package bench

import (
	"errors"
	"fmt"
	"io"
	"runtime"
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
	// Connections is the closed-loop concurrency of every cell.
	Connections int
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
}

// Cell is the measurement of one target under one payload.
type Cell struct {
	Target  string
	Sluice  bool
	Payload string
	Result  *loadtest.Result
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
		{"sluice embedded", func() (*Target, error) { return StartSluice(opts.Devices) }},
	}
	if opts.ClickHouseAddr != "" && opts.RedisAddr != "" {
		starters = append(starters, starter{"sluice clickhouse+redis", func() (*Target, error) {
			return StartSluiceProduction(opts.ClickHouseAddr, opts.RedisAddr, opts.Devices)
		}})
	} else {
		fmt.Fprintln(log, "note: CLICKHOUSE_ADDR or REDIS_ADDR is unset: skipping Sluice on ClickHouse+Redis (eval \"$(scripts/services.sh)\" to include it)")
	}
	var cells []Cell
	for _, s := range starters {
		if opts.Only != "" && !strings.Contains(s.name, opts.Only) {
			continue
		}
		t, err := s.start()
		if err != nil {
			return cells, fmt.Errorf("cannot start %s: %w", s.name, err)
		}
		fmt.Fprintf(log, "%s on %s\n", t.Name, t.Addr)
		for i, p := range Payloads {
			if opts.OnlyPayload != "" && !strings.Contains(p.Name, opts.OnlyPayload) {
				continue
			}
			// Each cell gets its own stretch of timestamps (about 115 days), so no
			// point of one cell replaces a point of another on the same device.
			base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() + int64(len(cells)+i)*10_000_000_000
			runtime.GC() // start every cell with the previous one's garbage collected
			res, err := loadtest.Run(loadtest.Config{
				Addr: t.Addr, Connections: opts.Connections,
				Duration: opts.Duration, Warmup: opts.Warmup, Requests: opts.Requests,
				Generate: loadtest.Telemetry(t.Paths, p.Rows, max(opts.Connections, 1), base),
			})
			if err != nil {
				return cells, errors.Join(err, t.Close())
			}
			fmt.Fprintf(log, "  %-8s %v\n", p.Name, res)
			if res.FirstErr != nil {
				fmt.Fprintf(log, "  first error: %v\n", res.FirstErr)
			}
			cells = append(cells, Cell{Target: t.Name, Sluice: t.Sluice, Payload: p.Name, Result: res})
		}
		if err := t.Close(); err != nil {
			return cells, fmt.Errorf("cannot stop %s: %w", t.Name, err)
		}
	}
	return cells, nil
}

// WriteTable writes the cells as a Markdown table; Sluice rows carry their req/s as
// a fraction of the ceiling's and the baseline's for the same payload.
func WriteTable(w io.Writer, cells []Cell) {
	ref := func(prefix, payload string) *loadtest.Result {
		for _, c := range cells {
			if !c.Sluice && strings.HasPrefix(c.Target, prefix) && c.Payload == payload {
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
	fmt.Fprintln(w, "| target | payload | req/s | points/s | p50 | p99 | p99.9 | max | not 2xx | Sluice/ceiling | Sluice/baseline |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, c := range cells {
		r := c.Result
		vsCeiling, vsBaseline := "", ""
		if c.Sluice {
			vsCeiling, vsBaseline = ratio(r, ref("ceiling", c.Payload)), ratio(r, ref("baseline", c.Payload))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %v | %v | %v | %v | %d | %s | %s |\n",
			c.Target, c.Payload, thousands(r.ReqPerSec()), thousands(r.PointsPerSec()),
			round(r.Quantile(50)), round(r.Quantile(99)), round(r.Quantile(99.9)), round(r.Max()),
			r.Requests-r.OK()+r.Errors, vsCeiling, vsBaseline)
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
