// Package procs sets how a process that serves Sluice shares its CPUs: the size of
// the Go scheduler, and a lower priority for background work.
package procs

import (
	"os"
	"runtime"
)

// Extra is how many Ps a Sluice process runs beyond one per CPU.
//
// Pebble (the embedded store, and the spool in front of ClickHouse) flushes
// memtables and compacts on goroutines that compute for hundreds of milliseconds
// at a time (one flush and one compaction at once by default), and syncs its log
// with fdatasync, which holds a thread and its P until the scheduler takes the P
// back. With one P per CPU those goroutines keep the request path off a core for a
// scheduler time slice (10 ms) at a time; with two Ps more the kernel interleaves
// them at a finer grain. On the 2-core bench machine (bench/RESULTS.md, "GOMAXPROCS"):
// the p99 of embedded 100-point batches at half of peak fell from 55-130 ms to
// 8-11 ms, single points rose 37k → 41-44k req/s.
const Extra = 2

// Set raises GOMAXPROCS to one per CPU (Go's default, which follows the cgroup CPU
// limit) plus Extra, unless the GOMAXPROCS environment variable sets it, and
// returns the value in force.
func Set() int {
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0)
	}
	n := runtime.GOMAXPROCS(0) + Extra
	runtime.GOMAXPROCS(n)
	return n
}
