// Package procs sets how a process that serves Sluice shares its CPUs: the size of
// the Go scheduler, the garbage collector's pace, and a lower priority for
// background work.
package procs

import (
	"os"
	"runtime"
	"runtime/debug"
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

// GCPercent is the garbage collector's GOGC for a Sluice process: the heap grows
// to three times what is live between collections instead of Go's twice.
//
// The embedded store's flushes and compactions allocate buffers the size of the
// values they write (a dense series' ten-minute window is MBs), which set off a
// collection every few hundred milliseconds while they run, and an execution
// trace of the bench's embedded 100-point batches at half of peak had commits
// waiting 5-16 ms for a CPU during those collections' mark phases. At 200 the
// batch cells ran half as many collections; their p99 at half of peak, 17
// alternated pairs, had a median of 19.9 ms against 28.1 ms (lower in 11 of 17;
// bench/RESULTS.md, "Garbage collection"). The price is memory: a node's live
// heap is tens of MB, and 10,000 idle long polls took 212-216 MiB RSS against
// 191-204 MiB.
const GCPercent = 200

// Set raises GOMAXPROCS to one per CPU (Go's default, which follows the cgroup CPU
// limit) plus Extra, unless the GOMAXPROCS environment variable sets it, and sets
// GOGC to GCPercent unless the GOGC environment variable sets it. It returns the
// values in force.
func Set() (maxProcs, gcPercent int) {
	maxProcs = runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") == "" {
		maxProcs += Extra
		runtime.GOMAXPROCS(maxProcs)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
		return maxProcs, GCPercent
	}
	// The runtime parsed the variable; SetGCPercent returns the setting it
	// replaces, so read it back.
	gcPercent = debug.SetGCPercent(-1)
	debug.SetGCPercent(gcPercent)
	return maxProcs, gcPercent
}
