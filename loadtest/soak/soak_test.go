package soak

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/loadtest"
	"github.com/sluice-iot/sluice/loadtest/report"
)

// TestSoakShort runs the whole soak on the real binary for a few seconds: probe,
// open-loop load, sampling and the verdict's arithmetic. Growth over 20 seconds
// says nothing about a leak, so only the mechanics and the absence of failed
// requests are checked; make soak is the real run.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the sluice binary for about 30 s")
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sluice-iot/sluice/cmd/sluice").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var log strings.Builder
	res, err := Run(context.Background(), Options{
		Binary: bin, DataDir: t.TempDir(), Duration: 16 * time.Second, Warmup: 4 * time.Second,
		Probe: 3 * time.Second, Devices: 4, Connections: 4, Profile: loadtest.ProfileMeter,
		SampleEvery: time.Second, Log: &log,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Log(log.String())
	if res.PeakRate <= 0 || res.Rate != res.PeakRate*0.5 {
		t.Fatalf("peak %v, rate %v: want the rate at half the peak", res.PeakRate, res.Rate)
	}
	if len(res.Samples) < 2*samplesPerEnd || res.Baseline.RSSBytes == 0 || res.End.Goroutines == 0 {
		t.Fatalf("samples %d, baseline %+v, end %+v", len(res.Samples), res.Baseline, res.End)
	}
	if s := res.Load.Summary; s.OK == 0 || s.Failed != 0 {
		t.Fatalf("load: %+v, status %v", s, res.Load.Status)
	}
	for _, f := range res.Failures {
		if !strings.Contains(f, "grew") && !strings.Contains(f, "never sent") {
			t.Errorf("failure other than growth or a busy machine's missed sends: %s", f)
		}
	}
	var md strings.Builder
	res.WriteMarkdown(&md)
	if !strings.Contains(md.String(), "Growth after warm-up") {
		t.Fatalf("markdown:\n%s", md.String())
	}
}

// TestCheck: growth is judged on the means of the ends of the window after warm-up.
func TestCheck(t *testing.T) {
	mk := func(rss ...int64) *Result {
		r := &Result{Warmup: 10, MaxGrowth: 0.10, Load: &report.Report{}}
		for i, v := range rss {
			r.Samples = append(r.Samples, Sample{Seconds: float64(i * 5), RSSBytes: v << 20, Goroutines: 100})
		}
		r.check()
		return r
	}
	// The first two samples are warm-up; 100 → 105 MiB is 5%.
	if r := mk(50, 80, 100, 100, 100, 101, 104, 105, 105, 105); !r.Passed() || r.RSSGrowth < 0.04 || r.RSSGrowth > 0.06 {
		t.Fatalf("5%%: %+v", r)
	}
	if r := mk(50, 80, 100, 100, 100, 110, 115, 120, 120, 120); r.Passed() {
		t.Fatalf("20%% passed: %+v", r)
	}
	if r := mk(100, 100, 100); r.Passed() {
		t.Fatalf("too few samples passed: %+v", r)
	}
}
