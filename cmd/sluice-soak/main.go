// Command sluice-soak runs a Sluice binary on the embedded default under steady
// load for a long time (make soak: 30 minutes at half of the peak rate) and fails
// when its RSS or goroutine count grows by 10% or more after warm-up, a request
// fails, or the node dies.
//
//	go run ./cmd/sluice-soak -binary bin/sluice -duration 30m -json soak.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluice-iot/sluice/loadtest"
	"github.com/sluice-iot/sluice/loadtest/soak"
)

func main() {
	var o soak.Options
	var profile, jsonFile string
	flag.StringVar(&o.Binary, "binary", "bin/sluice", "the sluice binary to soak")
	flag.StringVar(&o.DataDir, "data-dir", "", "parent of the node's fresh data folder (default: the system's temporary folder)")
	flag.DurationVar(&o.Duration, "duration", 30*time.Minute, "soak time at the rate")
	flag.DurationVar(&o.Warmup, "warmup", 0, "first part of the soak left out of the growth check (0 = a sixth of -duration)")
	flag.DurationVar(&o.Probe, "probe", 20*time.Second, "flat-out run that measures the peak")
	flag.Float64Var(&o.Rate, "rate", 0, "requests/s of the soak; 0 = -fraction of the measured peak")
	flag.Float64Var(&o.Fraction, "fraction", 0.5, "share of the peak to soak at")
	flag.IntVar(&o.Devices, "devices", 100, "devices of the fleet")
	flag.IntVar(&o.Connections, "connections", 32, "connections of the fleet")
	flag.StringVar(&profile, "profile", "single", "payload profile (see sluice-load)")
	flag.DurationVar(&o.SampleEvery, "sample", 10*time.Second, "how often RSS and goroutines are read")
	flag.Float64Var(&o.MaxGrowth, "max-growth", 0.10, "allowed growth of RSS and goroutines after warm-up")
	flag.StringVar(&jsonFile, "json", "", "write the result (samples and the load report) to this file")
	flag.Parse()
	p, err := loadtest.ParseProfile(profile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-soak:", err)
		os.Exit(2)
	}
	o.Profile, o.Log = p, os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := soak.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-soak:", err)
		os.Exit(1)
	}
	if jsonFile != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(jsonFile, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "sluice-soak:", err)
			os.Exit(1)
		}
	}
	res.WriteMarkdown(os.Stdout)
	if !res.Passed() {
		os.Exit(1)
	}
}
