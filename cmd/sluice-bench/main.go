// Command sluice-bench runs the bench harness (package bench) on this machine and
// prints a Markdown table: a no-op fasthttp handler, a net/http + encoding/json
// handler, and Sluice (embedded, and ClickHouse + Redis when CLICKHOUSE_ADDR and
// REDIS_ADDR are set), all in this process under one load generator.
//
//	go run ./cmd/sluice-bench -duration 10s -connections 64
//	go run ./cmd/sluice-bench -half-peak -payload single   # p99 at half of each cell's peak rate
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"time"

	"github.com/sluice-iot/sluice/bench"
	"github.com/sluice-iot/sluice/internal/procs"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-bench:", err)
		os.Exit(1)
	}
}

// run is main without the exit, so that the deferred profile and trace writers
// finish their files even when the run fails.
func run() error {
	opts := bench.Options{
		ClickHouseAddr: os.Getenv("CLICKHOUSE_ADDR"),
		RedisAddr:      os.Getenv("REDIS_ADDR"),
		Log:            os.Stderr,
	}
	flag.IntVar(&opts.Connections, "connections", 64, "connections per cell: the closed loop's workers, the open loop's most requests in flight")
	flag.Float64Var(&opts.Rate, "rate", 0, "run every cell open loop at this many requests/s, latency counted from when each was due (0: closed loop, flat out)")
	flag.BoolVar(&opts.HalfPeak, "half-peak", false, "run every cell closed loop flat out (its peak), then open loop at half that rate; overrides -rate")
	flag.DurationVar(&opts.Duration, "duration", 10*time.Second, "measured time per cell")
	flag.DurationVar(&opts.Warmup, "warmup", time.Second, "unrecorded warm-up per cell")
	flag.IntVar(&opts.Devices, "devices", 1, "devices Sluice takes telemetry for (1: the demo device; more: created for the run, one per connection at most)")
	flag.StringVar(&opts.Only, "only", "", "run only the targets whose name contains this (ceiling, baseline, sluice, embedded, clickhouse)")
	flag.StringVar(&opts.OnlyPayload, "payload", "", "run only the payloads whose name contains this (single, batch100)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (servers and load generator) to this file")
	traceFile := flag.String("trace", "", "write an execution trace of the whole run to this file (go tool trace: its \"User-defined regions\" page splits each group commit's \"ingest: store write\" into CPU, scheduler wait and sync wait; -pprof=sched shows where goroutines waited for a CPU)")
	nodeLog := flag.String("log", "", "write the Sluice nodes' log at this level and above (debug, info, warn, error) to stderr; none when empty")
	repeat := flag.Int("repeat", 1, fmt.Sprintf("run the whole selection this many times, then summarise each cell across the runs (median and range of req/s and p99, and in how many runs its p99 was within %v): one run of a cell is not a steady result", bench.TargetP99))
	memProfile := flag.String("memprofile", "", "write an allocation profile of the whole run to this file at the end (go tool pprof -sample_index=alloc_space)")
	flag.Parse()
	if *nodeLog != "" {
		var level slog.Level
		if err := level.UnmarshalText([]byte(*nodeLog)); err != nil {
			return fmt.Errorf("-log: %w", err)
		}
		opts.NodeLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	// Every target runs in this process; they all get the scheduler and the
	// garbage collector the sluice binary sets up for itself (CPUs + procs.Extra
	// Ps, GOGC procs.GCPercent; the GOMAXPROCS and GOGC variables override).
	_, gcPercent := procs.Set()

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			return err
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			return err
		}
		defer f.Close()
		defer trace.Stop()
	}
	mode := "closed loop"
	switch {
	case opts.HalfPeak:
		mode = "closed loop (peak), then open loop at half the peak"
	case opts.Rate > 0:
		mode = fmt.Sprintf("open loop at %.0f req/s", opts.Rate)
	}
	fmt.Fprintf(os.Stderr, "sluice-bench: %s, %d connections, %v per cell after %v warm-up, GOMAXPROCS %d on %d CPUs, GOGC %d, %s\n",
		mode, opts.Connections, opts.Duration, opts.Warmup, runtime.GOMAXPROCS(0), runtime.NumCPU(), gcPercent, runtime.Version())
	var runs [][]bench.Cell
	var err error
	for i := range max(*repeat, 1) {
		if *repeat > 1 {
			fmt.Printf("Run %d of %d\n\n", i+1, *repeat)
		}
		var cells []bench.Cell
		cells, err = bench.Run(opts)
		bench.WriteTable(os.Stdout, cells)
		fmt.Println()
		if err != nil {
			break
		}
		runs = append(runs, cells)
	}
	if *repeat > 1 && len(runs) > 0 {
		fmt.Printf("Across %d runs\n\n", len(runs))
		bench.WriteRepeatSummary(os.Stdout, runs)
	}
	if *memProfile != "" {
		err = errors.Join(err, writeAllocs(*memProfile))
	}
	return err
}

// writeAllocs writes the allocation profile: everything allocated since start,
// sampled (runtime.MemProfileRate), by call stack.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
