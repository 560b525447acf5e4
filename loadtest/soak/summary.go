package soak

import (
	"fmt"
	"io"
)

// WriteMarkdown writes the result as the bench/RESULTS.md section's body: the
// verdict, the rates, the samples at the window's ends and the latency.
func (r *Result) WriteMarkdown(w io.Writer) {
	verdict := "**passed**"
	if !r.Passed() {
		verdict = "**failed**"
	}
	fmt.Fprintf(w, "- Started %s; %s.\n", r.StartedAt.Format("2006-01-02 15:04 UTC"), verdict)
	for _, f := range r.Failures {
		fmt.Fprintf(w, "  - %s\n", f)
	}
	if r.PeakRate > 0 {
		fmt.Fprintf(w, "- Peak (flat-out probe): %.0f req/s; soak rate %.0f req/s (open loop).\n", r.PeakRate, r.Rate)
	} else {
		fmt.Fprintf(w, "- Soak rate %.0f req/s (open loop, given).\n", r.Rate)
	}
	if r.Load != nil {
		s, l := r.Load.Summary, r.Load.Latency
		fmt.Fprintf(w, "- %.0f s, %d requests (%d OK, %d failed, %d missed), %d points; latency from the due time p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max %.1f ms.\n",
			s.ElapsedSeconds, s.Requests, s.OK, s.Failed, s.Missed, s.Points, l.P50, l.P99, l.P999, l.Max)
	}
	fmt.Fprintf(w, "\n| | seconds | RSS MiB | goroutines | heap in use MiB |\n|---|--:|--:|--:|--:|\n")
	if len(r.Samples) > 0 {
		row(w, "first sample", r.Samples[0])
	}
	row(w, fmt.Sprintf("after warm-up (mean of %d)", samplesPerEnd), r.Baseline)
	row(w, fmt.Sprintf("end (mean of %d)", samplesPerEnd), r.End)
	fmt.Fprintf(w, "\nGrowth after warm-up: RSS %+.1f%%, goroutines %+.1f%% (limit %.0f%%).\n",
		100*r.RSSGrowth, 100*r.GoroutineGrowth, 100*r.MaxGrowth)
}

func row(w io.Writer, name string, s Sample) {
	fmt.Fprintf(w, "| %s | %.0f | %.1f | %d | %.1f |\n", name, s.Seconds, mib(s.RSSBytes), s.Goroutines, mib(s.HeapBytes))
}
