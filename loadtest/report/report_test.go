package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluice-iot/sluice/loadtest"
)

// sample is a report as a fleet run would fill it.
func sample(t *testing.T) *Report {
	t.Helper()
	h := hdrhistogram.New(1, time.Minute.Microseconds(), 3)
	for i := range int64(1000) {
		h.RecordValue(1000 + i*10) // 1 ms … 11 ms
	}
	failed := hdrhistogram.New(1, time.Minute.Microseconds(), 3)
	failed.RecordValues(100, 20) // the 503s and the refused connections: 0.1 ms
	res := &loadtest.Result{
		Requests: 990, Errors: 10, Points: 2940, Elapsed: 2 * time.Second,
		FirstErr: errors.New("dial tcp: connection refused"),
		Status:   map[int]int64{200: 980, 503: 10}, Latency: h, Service: h, FailedLatency: failed,
		TransportErrors: map[string]int64{"timeout": 10},
		Kinds: map[string]*loadtest.Counts{
			"telemetry":  {Requests: 900, Points: 2940, Errors: 10, Status: map[int]int64{200: 890, 503: 10}},
			"attributes": {Requests: 90, Status: map[int]int64{200: 90}},
		},
		Timeline: []loadtest.Sample{
			{At: time.Second, Span: time.Second, Requests: 500, OK: 495, Errors: 5, Points: 1470, P50: 2 * time.Millisecond, P99: 9 * time.Millisecond, Max: 11 * time.Millisecond, Latencies: 495},
			{At: 2 * time.Second, Span: time.Second, Requests: 490, OK: 485, Errors: 5, Points: 1470, P50: 3 * time.Millisecond, P99: 10 * time.Millisecond, Max: 11 * time.Millisecond, Latencies: 485},
		},
	}
	r := Build(res)
	r.Target, r.StartedAt = "http://sluice.example:8080", time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	r.Setup = Setup{Mode: "create", Devices: 10, Seconds: 0.5}
	r.Config = Config{Profile: "meter", Rate: 500, Connections: 8, DurationSeconds: 2, TimeoutSeconds: 10, AttributesEvery: 10}
	r.RPC = &RPC{Pollers: 2, Polls: 4, Empty: 2, Failed: 2, Status: map[string]int64{"404": 2, "408": 2}, TransportErrors: map[string]int64{}}
	return r
}

func TestBuild(t *testing.T) {
	r := sample(t)
	s := r.Summary
	if s.Requests != 1000 || s.OK != 980 || s.Failed != 20 || s.TransportErrors != 10 || s.Points != 2940 ||
		s.RequestsPerSec != 500 || s.PointsPerSec != 1470 || s.ElapsedSeconds != 2 {
		t.Fatalf("summary %+v", s)
	}
	if r.Latency.P50 < 5.9 || r.Latency.P50 > 6.1 || r.Latency.Max < 10.9 || r.Latency.P999 < r.Latency.P99 || r.Latency.Count != 1000 {
		t.Fatalf("latency %+v", r.Latency)
	}
	if r.Status["503"] != 10 || r.Kinds["telemetry"].OK != 890 || r.Kinds["telemetry"].Requests != 910 || r.Kinds["attributes"].OK != 90 {
		t.Fatalf("status %v, kinds %+v", r.Status, r.Kinds)
	}
	if len(r.Timeline) != 2 || r.Timeline[0].RequestsPerSec != 505 || r.Timeline[0].Failed != 10 || *r.Timeline[1].P99 != 10 {
		t.Fatalf("timeline %+v", r.Timeline)
	}
	if f := r.FailedLatency; f.Count != 20 || f.Max > 0.11 {
		t.Fatalf("failed latency %+v", f)
	}
}

// TestTimelineNoData: an interval without 2xx answers has no latency: null in
// the JSON, a gap in the chart (the lines around it end, a lone point is a dot),
// never 0 ms.
func TestTimelineNoData(t *testing.T) {
	at := func(s int, latencies int64) loadtest.Sample {
		return loadtest.Sample{At: time.Duration(s) * time.Second, Span: time.Second, Requests: 10, OK: latencies,
			P50: time.Millisecond, P90: time.Millisecond, P99: 2 * time.Millisecond, Max: 3 * time.Millisecond, Latencies: latencies}
	}
	r := Build(&loadtest.Result{Status: map[int]int64{}, Timeline: []loadtest.Sample{at(1, 10), at(2, 10), at(3, 0), at(4, 10)}})
	if r.Timeline[2].P50 != nil || r.Timeline[2].Max != nil || r.Timeline[3].P99 == nil {
		t.Fatalf("timeline %+v", r.Timeline)
	}
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct{ Timeline []map[string]any }
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if v, ok := doc.Timeline[2]["p99Ms"]; !ok || v != nil {
		t.Fatalf("no-data interval in the JSON: %v", doc.Timeline[2])
	}

	b.Reset()
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	latency := page[strings.Index(page, `aria-label="Latency`):]
	// Four series: each a line over the first two intervals and a dot at the last.
	if n, d := strings.Count(latency, "<polyline"), strings.Count(latency, "<circle"); n != 4 || d != 4 {
		t.Fatalf("latency chart: %d lines, %d dots", n, d)
	}
	if strings.Contains(page, "NaN") {
		t.Fatal("NaN in the page")
	}
}

// TestWriteJSON: the documented fields are there, under their names.
func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	if err := sample(t).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	f := func(path string) {
		t.Helper()
		var v any = doc
		for _, k := range strings.Split(path, "/") {
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%s: %v is not an object", path, v)
			}
			if v, ok = m[k]; !ok {
				t.Fatalf("no %s in %s", path, b.String())
			}
		}
	}
	for _, p := range []string{"tool", "target", "startedAt", "setup/mode", "setup/devices",
		"config/profile", "config/rate", "config/connections", "config/durationSeconds",
		"summary/requests", "summary/ok", "summary/failed", "summary/transportErrors", "summary/missed",
		"summary/points", "summary/requestsPerSec", "summary/okPerSec", "summary/pointsPerSec", "summary/elapsedSeconds",
		"latencyMs/p50", "latencyMs/p90", "latencyMs/p99", "latencyMs/p99.9", "latencyMs/max", "serviceTimeMs/p99",
		"failedLatencyMs/p99", "failedLatencyMs/count", "summary/drainSeconds",
		"status/200", "status/503", "transportErrors/timeout", "firstError", "byKind/telemetry/status/200",
		"rpc/polls", "rpc/status/404", "timeline"} {
		f(p)
	}
	tl := doc["timeline"].([]any)
	if len(tl) != 2 {
		t.Fatalf("timeline %v", tl)
	}
	for _, k := range []string{"t", "requestsPerSec", "pointsPerSec", "requests", "failed", "p50Ms", "p90Ms", "p99Ms", "maxMs"} {
		if _, ok := tl[0].(map[string]any)[k]; !ok {
			t.Fatalf("no %s in a timeline point: %v", k, tl[0])
		}
	}
}

// TestWriteHTML: the page has its charts as inline SVG, the numbers, and nothing
// that would fetch from the network.
func TestWriteHTML(t *testing.T) {
	r := sample(t)
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{"<!DOCTYPE html>", `aria-label="Throughput"`, `aria-label="Latency of 2xx answers per interval (from due time)"`,
		`aria-label="Data points acknowledged"`, "<polyline", "p99.9", "5.99ms", "503", "no answer: timeout", "RPC polling", "telemetry", "attributes"} {
		if !strings.Contains(page, want) {
			t.Fatalf("no %q in the page", want)
		}
	}
	if n := strings.Count(page, "<svg"); n != 3 {
		t.Fatalf("%d charts", n)
	}
	// Throughput: requests/s, failed/s and the target rate; latency: 4 percentiles.
	if n := strings.Count(page, `class="series"`); n != 3+1+4 {
		t.Fatalf("%d series", n)
	}
	offline := strings.ReplaceAll(page, r.Target, "")
	for _, bad := range []string{"http:", "https:", "//", "<script", "<link", "<img", "<iframe", "src=", "href=", "url(", "@import"} {
		if i := strings.Index(offline, bad); i >= 0 {
			t.Fatalf("the page refers outside (%q): …%s…", bad, offline[max(0, i-60):min(len(offline), i+60)])
		}
	}
	// A target name with markup is escaped.
	r.Target = `<b onmouseover="x">`
	b.Reset()
	r.WriteHTML(&b)
	if strings.Contains(b.String(), r.Target) {
		t.Fatal("the target is not escaped")
	}
}

func TestWriteHTMLEmpty(t *testing.T) {
	r := Build(&loadtest.Result{Status: map[int]int64{}})
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), emptyChart) {
		t.Fatal("an empty timeline is not said")
	}
}

func TestWriteText(t *testing.T) {
	var b bytes.Buffer
	sample(t).WriteText(&b)
	out := b.String()
	for _, want := range []string{"1,000 requests in 2.0s to http://sluice.example:8080: 500 req/s (490 2xx/s), 1,470 points/s", "failed 20 (no answer 10), missed 0",
		"latency (2xx) from due time:  p50 5.99ms  p90 9.99ms", "latency of failed requests:   p50 0.100ms",
		"status: 200 980, 503 10", "no answer: timeout 10 (first: dial tcp: connection refused)",
		"telemetry: 910 requests, ok 890", "rpc: 2 pollers, 4 polls"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in\n%s", want, out)
		}
	}

	// The wait for answers in flight is said apart from the run; a run without
	// a 2xx answer is said.
	r := sample(t)
	r.Summary.DrainSeconds, r.Latency = 0.3, Latency{}
	b.Reset()
	r.WriteText(&b)
	for _, want := range []string{"in 2.0s (+0.3s for answers in flight) to", "latency (2xx) from due time:  none"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("no %q in\n%s", want, b.String())
		}
	}
	// An interruption that did not wait for the answers in flight says so, and
	// does not claim a wait for them.
	r.Summary.Aborted = true
	b.Reset()
	r.WriteText(&b)
	if out := b.String(); !strings.Contains(out, "interrupted:") || strings.Contains(out, "answers in flight)") {
		t.Fatalf("aborted:\n%s", out)
	}
}

// TestMissedApart: an open loop whose target answered nothing 2xx has no 2xx
// percentiles (the missed requests are not in them), and a line and a JSON field
// of its own for the latency including the missed requests.
func TestMissedApart(t *testing.T) {
	missed := hdrhistogram.New(1, time.Hour.Microseconds(), 3)
	missed.RecordValues(50_000, 30) // 50 ms from due time to the end of the run
	failed := hdrhistogram.New(1, time.Hour.Microseconds(), 3)
	failed.RecordValues(2_000, 5)
	res := &loadtest.Result{Requests: 5, Status: map[int]int64{503: 5}, Elapsed: 2 * time.Second, Missed: 30,
		Latency: hdrhistogram.New(1, time.Hour.Microseconds(), 3), Service: hdrhistogram.New(1, time.Hour.Microseconds(), 3),
		FailedLatency: failed, MissedLatency: missed}
	r := Build(res)
	r.Config = Config{Rate: 20, Connections: 1}
	if r.Latency.Count != 0 || r.LatencyInclMissed == nil || r.LatencyInclMissed.Count != 30 || r.LatencyInclMissed.P50 < 49 {
		t.Fatalf("latency %+v, incl. missed %+v", r.Latency, r.LatencyInclMissed)
	}
	if r.Summary.OKPerSec != 0 || r.Summary.RequestsPerSec != 2.5 {
		t.Fatalf("summary %+v", r.Summary)
	}
	var b bytes.Buffer
	r.WriteText(&b)
	out := b.String()
	for _, want := range []string{"5 requests in 2.0s to : 2.5 req/s (0 2xx/s), 0 points/s", "latency (2xx) from due time:          none",
		"latency incl. missed, from due time:  p50 50.0ms", "service time (2xx):                   none"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in\n%s", want, out)
		}
	}
	b.Reset()
	r.WriteJSON(&b)
	var doc map[string]any
	json.Unmarshal(b.Bytes(), &doc)
	if doc["latencyMs"].(map[string]any)["count"] != 0.0 || doc["latencyInclMissedMs"].(map[string]any)["count"] != 30.0 ||
		doc["summary"].(map[string]any)["okPerSec"] != 0.0 {
		t.Fatalf("JSON %s", b.String())
	}
	b.Reset()
	r.WriteHTML(&b)
	page := b.String()
	for _, want := range []string{"2xx and missed, from due time", "open loop at 20 requests/s"} {
		if !strings.Contains(page, want) {
			t.Fatalf("no %q in the page", want)
		}
	}
	// Empty histograms: "none", never 0.000ms.
	if strings.Contains(page, "0.000ms") || strings.Count(page, ">none</td>") != 2 {
		t.Fatalf("empty latencies in the page: %d none", strings.Count(page, ">none</td>"))
	}

	// A closed loop has no such field.
	if r := Build(&loadtest.Result{Status: map[int]int64{}}); r.LatencyInclMissed != nil {
		t.Fatal("closed loop with latency incl. missed")
	}
}

// TestHTMLAborted: after a second Ctrl-C the page does not say that the
// answers in flight came in and count.
func TestHTMLAborted(t *testing.T) {
	r := sample(t)
	r.Summary.DrainSeconds = 0.4
	var b bytes.Buffer
	r.WriteHTML(&b)
	if !strings.Contains(b.String(), "came in over 0.4 s more") {
		t.Fatal("no drain sentence")
	}
	r.Summary.Aborted = true
	b.Reset()
	r.WriteHTML(&b)
	if strings.Contains(b.String(), "came in over") || !strings.Contains(b.String(), "Interrupted:") {
		t.Fatalf("aborted page says the answers came in")
	}
}

// TestDrainThreshold: a wait for the answers in flight below 0.05 s is
// mentioned neither in the terminal summary nor in the page (it read "came in
// over 0.0 s more" there).
func TestDrainThreshold(t *testing.T) {
	for _, c := range []struct {
		drain float64
		want  bool
	}{{0, false}, {0.001, false}, {0.049, false}, {0.05, true}, {0.4, true}} {
		r := sample(t)
		r.Summary.DrainSeconds = c.drain
		var page, text bytes.Buffer
		r.WriteHTML(&page)
		r.WriteText(&text)
		if strings.Contains(page.String(), "came in over") != c.want || strings.Contains(text.String(), "for answers in flight") != c.want {
			t.Fatalf("drain %v s: page and summary mention it: %v, %v; want %v", c.drain,
				strings.Contains(page.String(), "came in over"), strings.Contains(text.String(), "for answers in flight"), c.want)
		}
	}
}

// TestRPCFirstPollsCut: when a second interruption cut the pollers' first polls
// short, the summary, the page and the JSON say so instead of a bare "0 polls".
func TestRPCFirstPollsCut(t *testing.T) {
	r := sample(t)
	var page, text, doc bytes.Buffer
	r.WriteHTML(&page)
	r.WriteText(&text)
	r.WriteJSON(&doc)
	if strings.Contains(page.String(), "cut off") || strings.Contains(text.String(), "cut off") || strings.Contains(doc.String(), "firstPollsCut") {
		t.Fatal("a note of cut polls without any")
	}
	r.RPC = &RPC{Pollers: 3, FirstPollsCut: 3, Status: map[string]int64{}, TransportErrors: map[string]int64{}}
	page.Reset()
	text.Reset()
	doc.Reset()
	r.WriteHTML(&page)
	r.WriteText(&text)
	r.WriteJSON(&doc)
	if !strings.Contains(text.String(), "rpc: 3 pollers, 0 polls") ||
		!strings.Contains(text.String(), "the first polls of 3 pollers were cut off and are not counted") ||
		!strings.Contains(page.String(), "the first polls of 3 pollers were cut off") || !strings.Contains(doc.String(), `"firstPollsCut": 3`) {
		t.Fatalf("summary:\n%s\nJSON:\n%s", text.String(), doc.String())
	}
}

func TestRate(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.5: "0.5", 0.123456: "0.123", 2.345: "2.35", 9.9: "9.9", 9.9996: "10",
		10: "10", 12.6: "13", 1234.5: "1,234", 0.0001234: "0.000123", 1e-9: "0"} {
		if got := Rate(v); got != want {
			t.Fatalf("Rate(%v) = %q, want %q", v, got, want)
		}
	}
	r := sample(t)
	r.Config.Rate, r.Summary.RequestsPerSec = 0.5, 0.25
	var b bytes.Buffer
	r.WriteHTML(&b)
	if !strings.Contains(b.String(), "open loop at 0.5 requests/s") || !strings.Contains(b.String(), ">0.25</td>") {
		t.Fatal("small rates rounded away in the page")
	}
	b.Reset()
	r.WriteText(&b)
	if !strings.Contains(b.String(), ": 0.25 req/s") {
		t.Fatalf("small rate in the text:\n%s", b.String())
	}
}

func TestChartNumbers(t *testing.T) {
	f := func(got, want string) {
		t.Helper()
		if got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	f(tickLabel(0), "0")
	f(tickLabel(0.25), "0.25")
	f(tickLabel(2.5), "2.5")
	f(tickLabel(40), "40")
	f(tickLabel(25000), "25k")
	f(tickLabel(1.5e6), "1.5M")
	f(Thousands(1234567.4), "1,234,567")
	f(Thousands(-1234), "-1,234")
	f(Thousands(999), "999")
	f(Millis(0.1234), "0.123ms")
	f(Millis(12.34), "12.3ms")
	f(Millis(1234.5), "1234ms")
	g := func(v, want float64) {
		t.Helper()
		if got := niceCeil(v); got != want {
			t.Fatalf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
	g(0, 1)
	g(3, 5)
	g(4999, 5000)
	g(5000, 5000)
	g(0.013, 0.02)
	g(210, 250)
}

// TestChartPoints: the polyline's points are in the plot area, the highest value at
// its top.
func TestChartPoints(t *testing.T) {
	svg := lineChart("T", "u", []float64{1, 2}, []series{{name: "a", color: "#000", ys: []float64{0, 100}}})
	m := regexp.MustCompile(`points="([^"]*)"`).FindStringSubmatch(svg)
	if m == nil {
		t.Fatal(svg)
	}
	want := "475.0,280.0 880.0,36.0" // x: padL + x/xMax*plotW; y: padT + plotH - y/yMax*plotH
	if m[1] != want {
		t.Fatalf("points %q, want %q", m[1], want)
	}
}
