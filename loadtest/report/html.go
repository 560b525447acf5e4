package report

import (
	"html/template"
	"io"
	"math"
)

// WriteHTML writes the report as one self-contained page: inline CSS, the charts as
// inline SVG, no scripts and no outside references, so it opens offline and can be
// mailed or archived as is.
func (r *Report) WriteHTML(w io.Writer) error {
	xs := make([]float64, len(r.Timeline))
	rps, failed, pps := make([]float64, len(xs)), make([]float64, len(xs)), make([]float64, len(xs))
	p50, p90, p99, mx := make([]float64, len(xs)), make([]float64, len(xs)), make([]float64, len(xs)), make([]float64, len(xs))
	for i, p := range r.Timeline {
		xs[i] = p.Second
		rps[i], pps[i] = p.RequestsPerSec, p.PointsPerSec
		span := p.Second
		if i > 0 {
			span -= r.Timeline[i-1].Second
		}
		if span > 0 {
			failed[i] = float64(p.Failed) / span
		}
		p50[i], p90[i], p99[i], mx[i] = orNaN(p.P50), orNaN(p.P90), orNaN(p.P99), orNaN(p.Max)
	}
	throughput := []series{{name: "requests/s", color: "#1f77b4", ys: rps}, {name: "failed/s", color: "#d62728", ys: failed}}
	if r.Config.Rate > 0 {
		target := make([]float64, len(xs))
		for i := range target {
			target[i] = r.Config.Rate
		}
		throughput = append(throughput, series{name: "target rate", color: "#7f7f7f", ys: target, dashed: true})
	}
	latencyFrom := "from send"
	if r.Config.Rate > 0 {
		latencyFrom = "from due time"
	}
	data := struct {
		*Report
		ThroughputChart, PointsChart, LatencyChart template.HTML
		LatencyFrom                                string
	}{
		Report:          r,
		ThroughputChart: template.HTML(lineChart("Throughput", "requests per second", xs, throughput)),
		PointsChart:     template.HTML(lineChart("Data points acknowledged", "points per second", xs, []series{{name: "points/s", color: "#2ca02c", ys: pps}})),
		LatencyChart: template.HTML(lineChart("Latency of 2xx answers per interval ("+latencyFrom+")", "milliseconds", xs, []series{
			{name: "p50", color: "#2ca02c", ys: p50}, {name: "p90", color: "#1f77b4", ys: p90},
			{name: "p99", color: "#ff7f0e", ys: p99}, {name: "max", color: "#d62728", ys: mx, dashed: true}})),
		LatencyFrom: latencyFrom,
	}
	return page.Execute(w, data)
}

// orNaN is v, or NaN (no data: a gap in the chart) for nil.
func orNaN(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":        Millis,
	"thousands": Thousands,
	"rate":      Rate,
	"int":       func(v int64) string { return Thousands(float64(v)) },
	"keys":      sortedKeys[int64],
	"row": func(name, from string, l Latency, class string) latencyRow {
		return latencyRow{Name: name + from, Class: class, L: l}
	},
	"deref":     func(l *Latency) Latency { return *l },
	"showDrain": Summary.showDrain,
	"kindKeys":  sortedKeys[Kind],
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice-load report: {{.Target}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:960px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.25em .8em;border-bottom:1px solid #eee;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}.muted{color:#777}.bad{color:#c00}
svg.chart{display:block;margin:1em 0;background:#fcfcfc;border:1px solid #eee}
</style></head><body>
<h1>sluice-load report</h1>
<p>Target <b>{{.Target}}</b>, started {{.StartedAt.Format "2006-01-02 15:04:05 MST"}}.
Devices: {{.Setup.Devices}} ({{.Setup.Mode}}, set up in {{printf "%.1f" .Setup.Seconds}} s).
Profile <b>{{.Config.Profile}}</b>{{if .Config.BatchSize}} ({{.Config.BatchSize}} points per request){{end}},
{{.Config.Connections}} connections,
{{if .Config.Rate}}open loop at {{rate .Config.Rate}} requests/s{{else}}closed loop, flat out{{end}}{{if .Config.DurationSeconds}}, {{printf "%g" .Config.DurationSeconds}} s{{end}}{{if .Config.Requests}}, at most {{int .Config.Requests}} requests{{end}}{{if .Config.WarmupSeconds}} after {{printf "%g" .Config.WarmupSeconds}} s warm-up{{end}}.
{{if .Config.AttributesEvery}}Every device posts attributes every {{.Config.AttributesEvery}} requests.{{end}}
{{if .Config.Encoding}}Bodies sent with Content-Encoding {{.Config.Encoding}}.{{end}}</p>

<h2>Summary</h2>
<table>
<tr><th>requests</th><td class="n">{{int .Summary.Requests}}</td><th>requests/s</th><td class="n">{{rate .Summary.RequestsPerSec}}</td></tr>
<tr><th>ok (2xx)</th><td class="n{{if not .Summary.OK}} bad{{end}}">{{int .Summary.OK}}</td><th>2xx/s</th><td class="n{{if not .Summary.OK}} bad{{end}}">{{rate .Summary.OKPerSec}}</td></tr>
<tr><th>failed</th><td class="n{{if .Summary.Failed}} bad{{end}}">{{int .Summary.Failed}}</td><th>points/s</th><td class="n">{{rate .Summary.PointsPerSec}}</td></tr>
<tr><th>no answer</th><td class="n{{if .Summary.TransportErrors}} bad{{end}}">{{int .Summary.TransportErrors}}</td><th>points</th><td class="n">{{int .Summary.Points}}</td></tr>
<tr>{{if .Config.Rate}}<th>missed</th><td class="n{{if .Summary.Missed}} bad{{end}}">{{int .Summary.Missed}}</td>{{else}}<td></td><td></td>{{end}}<th>elapsed</th><td class="n">{{printf "%.1f" .Summary.ElapsedSeconds}} s</td></tr>
</table>
{{if .Config.Rate}}<p class="muted">Missed: due but never sent, every connection was busy.</p>{{end}}
<p class="muted">Rates are over the elapsed time of the measured run.{{if showDrain .Summary}} The answers to the requests in flight at its end came in over {{printf "%.1f" .Summary.DrainSeconds}} s more; they count in the totals and in the last interval of the charts.{{end}}</p>
{{if .Summary.Aborted}}<p class="bad">Interrupted: the requests still in flight were not waited for and are not counted.</p>{{end}}

<h2>Latency</h2>
<table>
<tr><th></th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th><th>mean</th></tr>
{{template "latency" row "2xx, " .LatencyFrom .Latency ""}}
{{if .Config.Rate}}{{template "latency" row "2xx, service time" "" .ServiceTime ""}}{{end}}
{{if and .LatencyInclMissed .Summary.Missed}}{{template "latency" row "2xx and missed, from due time" "" (deref .LatencyInclMissed) ""}}{{end}}
{{if .FailedLatency.Count}}{{template "latency" row "failed, " .LatencyFrom .FailedLatency "bad"}}{{end}}
</table>
<p class="muted">Latency percentiles are of the 2xx answers; failed requests (another status, or no answer) are apart, so that fast errors do not pass for fast answers{{if .Config.Rate}}, and so are the missed requests, which the "2xx and missed" row adds at the time from when each was due to the end of the run (a lower bound){{end}}. An interval without 2xx answers is a gap in the latency chart.</p>
{{if .Config.Rate}}<p class="muted">Latency counts from when each request was due on the schedule, so time spent waiting for a free connection is included (no coordinated omission); service time counts from the actual send.</p>{{end}}

{{.ThroughputChart}}
{{.PointsChart}}
{{.LatencyChart}}

<h2>Answers</h2>
<table><tr><th>status</th><th>requests</th></tr>
{{range keys .Status}}<tr><td>{{.}}</td><td class="n">{{int (index $.Status .)}}</td></tr>{{end}}
{{range keys .TransportErrors}}<tr><td class="bad">no answer: {{.}}</td><td class="n">{{int (index $.TransportErrors .)}}</td></tr>{{end}}
</table>
{{if .FirstError}}<p class="muted">First transport error: {{.FirstError}}</p>{{end}}
{{if .Kinds}}<table><tr><th>kind</th><th>requests</th><th>ok</th><th>points</th><th>no answer</th><th>status</th></tr>
{{range kindKeys .Kinds}}{{$k := index $.Kinds .}}<tr><td>{{.}}</td><td class="n">{{int $k.Requests}}</td><td class="n">{{int $k.OK}}</td><td class="n">{{int $k.Points}}</td><td class="n">{{int $k.TransportErrors}}</td><td>{{range $s := keys $k.Status}}{{$s}}: {{int (index $k.Status $s)}} {{end}}</td></tr>{{end}}
</table>{{end}}

{{with .RPC}}<h2>RPC polling</h2>
<table>
<tr><th>pollers</th><td class="n">{{.Pollers}}</td><th>polls answered</th><td class="n">{{int .Polls}}</td></tr>
<tr><th>RPCs delivered</th><td class="n">{{int .Delivered}}</td><th>replies ok</th><td class="n">{{int .Replies}}</td></tr>
<tr><th>empty (timed out)</th><td class="n">{{int .Empty}}</td><th>failed</th><td class="n{{if .Failed}} bad{{end}}">{{int .Failed}}</td></tr>
</table>
{{if .FirstPollsCut}}<p class="bad">Interrupted: the first polls of {{.FirstPollsCut}} pollers were cut off and are not counted.</p>{{end}}
<table><tr><th>status</th><th>answers</th></tr>
{{range $s := keys .Status}}<tr><td>{{$s}}</td><td class="n">{{int (index $.RPC.Status $s)}}</td></tr>{{end}}
{{range $s := keys .TransportErrors}}<tr><td class="bad">no answer: {{$s}}</td><td class="n">{{int (index $.RPC.TransportErrors $s)}}</td></tr>{{end}}
</table>{{end}}
<p class="muted">Generated by sluice-load. The same data is in the JSON report (-json).</p>
</body></html>
{{define "latency"}}<tr><th{{if .Class}} class="{{.Class}}"{{end}}>{{.Name}}</th>{{with .L}}{{if .Count}}<td class="n">{{ms .P50}}</td><td class="n">{{ms .P90}}</td><td class="n">{{ms .P99}}</td><td class="n">{{ms .P999}}</td><td class="n">{{ms .Max}}</td><td class="n">{{ms .Mean}}</td>{{else}}<td colspan="6" class="muted">none</td>{{end}}{{end}}</tr>{{end}}
`))

// latencyRow is one row of the page's latency table: a histogram with Count 0
// says "none" instead of 0.000ms in every column.
type latencyRow struct {
	Name, Class string
	L           Latency
}
