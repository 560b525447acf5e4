package procs

// BackgroundNice is the nice value Background gives a thread: CFS then weighs it
// at about a tenth of a request thread (110 against 1024) while both want a CPU,
// and at full speed when the CPUs are otherwise idle. RocksDB offers the same for
// its compaction threads (Env::LowerThreadPoolCPUPriority).
//
// Measured on the 2-core bench machine with Pebble's flushes and compactions
// demoted (bench/RESULTS.md, "Background work at lower priority"): the p99 of
// embedded 100-point batches at about half of peak fell from a median of 63 ms to
// 32 ms (17 alternated pairs, lower in 14), and the closed-loop peak stayed within
// the run-to-run spread. +19 measured about the same at half of peak and a lower
// peak in 3 runs: a flush that gets too little CPU under full load holds up the
// memtables queued behind it.
const BackgroundNice = 10

// Background lowers the CPU priority of the calling goroutine's work to
// BackgroundNice, for a goroutine that does background work and then ends
// (Pebble runs each flush and each compaction on a goroutine of its own). It
// locks the goroutine to its thread for good, so the priority stays with this
// goroutine only; when it ends, the runtime ends the thread with it instead of
// handing the thread to another goroutine. It reports whether the priority
// changed (only on Linux, where a thread's nice value is its own).
func Background() bool { return background() }
