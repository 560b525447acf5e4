// Package report turns a fleet simulator run (loadtest.Result plus what the fleet
// did around it) into a JSON document, a self-contained HTML page with throughput
// and latency charts, and a text summary for the terminal.
package report

import (
	"encoding/json"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluice-iot/sluice/loadtest"
)

// Report is one run. Latencies are in milliseconds, rates per second; the JSON field
// names are the stable interface for scripts comparing runs.
type Report struct {
	Tool      string    `json:"tool"` // "sluice-load"
	Target    string    `json:"target"`
	StartedAt time.Time `json:"startedAt"`
	Setup     Setup     `json:"setup"`
	Config    Config    `json:"config"`
	Summary   Summary   `json:"summary"`
	// Latency is of the 2xx answers only: from when each request was due (open
	// loop, Config.Rate > 0) or from its send (closed loop); all zero, Count 0,
	// without a 2xx answer. ServiceTime is of the 2xx answers from the send.
	// FailedLatency is of the requests answered other than 2xx or not answered,
	// measured as Latency is: kept apart, a refused connection or a fast 503 would
	// make a dead target look quick. LatencyInclMissed (open loop only) is of the
	// 2xx answers and the missed requests together, from the due time, each
	// missed one at the time from when it was due to the end of the run (a lower
	// bound): the figure coordinated omission cannot flatter.
	Latency           Latency  `json:"latencyMs"`
	ServiceTime       Latency  `json:"serviceTimeMs"`
	FailedLatency     Latency  `json:"failedLatencyMs"`
	LatencyInclMissed *Latency `json:"latencyInclMissedMs,omitempty"`
	// Status counts answered requests by HTTP status ("200", "503", …);
	// TransportErrors counts the unanswered ones by kind ("timeout", …).
	Status          map[string]int64 `json:"status"`
	TransportErrors map[string]int64 `json:"transportErrors"`
	FirstError      string           `json:"firstError,omitempty"`
	// Kinds splits the counts by request kind ("telemetry", "attributes").
	Kinds    map[string]Kind `json:"byKind"`
	RPC      *RPC            `json:"rpc,omitempty"`
	Timeline []Point         `json:"timeline"`
}

// Setup is how the fleet got its devices.
type Setup struct {
	Mode    string  `json:"mode"` // "create", "provision" or "tokens"
	Devices int     `json:"devices"`
	Seconds float64 `json:"seconds"`
}

// Config is the traffic that was asked for.
type Config struct {
	Profile         string  `json:"profile"`
	BatchSize       int     `json:"batchSize,omitempty"`
	Encoding        string  `json:"encoding,omitempty"` // Content-Encoding of the bodies: "gzip", "zstd"; none when empty
	Rate            float64 `json:"rate"`               // requests/s over all connections; 0 = flat out
	Connections     int     `json:"connections"`
	DurationSeconds float64 `json:"durationSeconds,omitempty"`
	Requests        int64   `json:"requests,omitempty"`
	WarmupSeconds   float64 `json:"warmupSeconds,omitempty"`
	TimeoutSeconds  float64 `json:"timeoutSeconds"`
	AttributesEvery int     `json:"attributesEvery,omitempty"`
	RPCPollers      int     `json:"rpcPollers,omitempty"`
	RPCTimeoutMs    int64   `json:"rpcTimeoutMs,omitempty"`
}

// Summary is the totals of the measured run (warm-up excluded).
type Summary struct {
	Requests        int64 `json:"requests"`        // sent and answered or failed
	OK              int64 `json:"ok"`              // answered 2xx
	Failed          int64 `json:"failed"`          // answered otherwise, or not answered
	TransportErrors int64 `json:"transportErrors"` // not answered
	Missed          int64 `json:"missed"`          // open loop: due but never sent
	Points          int64 `json:"points"`          // data points acknowledged (2xx)
	// ElapsedSeconds is the measured run, which the rates are over: to the end of
	// the duration, the interruption, or the last request sent. DrainSeconds is
	// the wait after it for the answers to requests then in flight, which count
	// in the totals.
	ElapsedSeconds float64 `json:"elapsedSeconds"`
	DrainSeconds   float64 `json:"drainSeconds"`
	RequestsPerSec float64 `json:"requestsPerSec"` // sent and answered or failed, per second
	OKPerSec       float64 `json:"okPerSec"`       // answered 2xx, per second
	PointsPerSec   float64 `json:"pointsPerSec"`
	// Aborted: a second interruption ended the wait for requests in flight;
	// those are in no count.
	Aborted bool `json:"aborted,omitempty"`
}

// Latency is an HDR histogram's percentiles, in milliseconds.
type Latency struct {
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99.9"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
	Count int64   `json:"count"`
}

// Kind is the counts of one request kind.
type Kind struct {
	Requests        int64            `json:"requests"`
	OK              int64            `json:"ok"`
	Points          int64            `json:"points"`
	TransportErrors int64            `json:"transportErrors"`
	Status          map[string]int64 `json:"status"`
}

// RPC is what the devices that long-poll for server-side RPC saw.
type RPC struct {
	Pollers int   `json:"pollers"`
	Polls   int64 `json:"polls"` // answered polls
	// Delivered polls carried an RPC request; Empty ones timed out (408, or 200
	// without a request); Replies were answered 2xx.
	Delivered       int64            `json:"delivered"`
	Empty           int64            `json:"empty"`
	Replies         int64            `json:"replies"`
	Failed          int64            `json:"failed"` // any other status, or no answer
	Status          map[string]int64 `json:"status"` // polls and replies by status
	TransportErrors map[string]int64 `json:"transportErrors"`
	// FirstPollsCut is how many pollers' first polls a second interruption cut
	// short (Summary.Aborted): those polls are in no count, so a report of N
	// pollers and 0 polls says why.
	FirstPollsCut int `json:"firstPollsCut,omitempty"`
}

// Point is one interval of the timeline. The last one also holds the answers
// that came after the end of the run (the drain).
type Point struct {
	Second         float64 `json:"t"` // end of the interval, from the end of the warm-up
	RequestsPerSec float64 `json:"requestsPerSec"`
	PointsPerSec   float64 `json:"pointsPerSec"`
	Requests       int64   `json:"requests"`
	Failed         int64   `json:"failed"`
	// The latency of the 2xx answers that ended in the interval; nil (null) when
	// there were none: no data, not 0 ms.
	P50 *float64 `json:"p50Ms"`
	P90 *float64 `json:"p90Ms"`
	P99 *float64 `json:"p99Ms"`
	Max *float64 `json:"maxMs"`
}

// Build fills the measured parts of a report (Summary, latencies, counts, timeline)
// from res; the caller sets Target, StartedAt, Setup, Config and RPC.
func Build(res *loadtest.Result) *Report {
	r := &Report{
		Tool:            "sluice-load",
		Latency:         latency(res.Latency),
		ServiceTime:     latency(res.Service),
		FailedLatency:   latency(res.FailedLatency),
		Status:          statusMap(res.Status),
		TransportErrors: maps.Clone(res.TransportErrors),
		Kinds:           map[string]Kind{},
		Timeline:        []Point{},
	}
	if r.TransportErrors == nil {
		r.TransportErrors = map[string]int64{}
	}
	if res.FirstErr != nil {
		r.FirstError = res.FirstErr.Error()
	}
	r.Summary = Summary{
		Requests: res.Requests + res.Errors, OK: res.OK(), Failed: res.Failed(), TransportErrors: res.Errors,
		Missed: res.Missed, Points: res.Points, ElapsedSeconds: res.Elapsed.Seconds(), DrainSeconds: res.Drain.Seconds(),
		RequestsPerSec: perSec(res.Requests+res.Errors, res.Elapsed), OKPerSec: res.OKPerSec(), PointsPerSec: res.PointsPerSec(),
		Aborted: res.Aborted,
	}
	if res.MissedLatency != nil { // an open loop
		l := latency(res.LatencyInclMissed())
		r.LatencyInclMissed = &l
	}
	for name, c := range res.Kinds {
		k := Kind{Requests: c.Requests + c.Errors, Points: c.Points, TransportErrors: c.Errors, Status: statusMap(c.Status)}
		for s, n := range c.Status {
			if s >= 200 && s < 300 {
				k.OK += n
			}
		}
		r.Kinds[name] = k
	}
	for _, s := range res.Timeline {
		p := Point{
			Second: s.At.Seconds(), RequestsPerSec: perSec(s.Requests+s.Errors, s.Span), PointsPerSec: perSec(s.Points, s.Span),
			Requests: s.Requests + s.Errors, Failed: s.Requests - s.OK + s.Errors,
		}
		if s.Latencies > 0 {
			p.P50, p.P90, p.P99, p.Max = msPtr(s.P50), msPtr(s.P90), msPtr(s.P99), msPtr(s.Max)
		}
		r.Timeline = append(r.Timeline, p)
	}
	return r
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func latency(h *hdrhistogram.Histogram) Latency {
	if h == nil || h.TotalCount() == 0 {
		return Latency{}
	}
	q := func(p float64) float64 { return float64(h.ValueAtQuantile(p)) / 1000 }
	return Latency{P50: q(50), P90: q(90), P99: q(99), P999: q(99.9), Max: float64(h.Max()) / 1000,
		Mean: h.Mean() / 1000, Count: h.TotalCount()}
}

func statusMap(m map[int]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for s, n := range m {
		out[strconv.Itoa(s)] = n
	}
	return out
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func msPtr(d time.Duration) *float64 {
	v := ms(d)
	return &v
}

func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
