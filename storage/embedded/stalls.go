package embedded

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/cockroachdb/pebble/v2"

	"github.com/sluice-iot/sluice/internal/procs"
)

// Pebble stops writes when flushes or compactions fall behind (too many
// memtables waiting, too many L0 files). Every acknowledgement waits meanwhile,
// so a stall is a latency spike of its whole length: counted and logged, with
// Pebble's reason, to tell one from the background work's CPU in a tail.
var (
	writeStalls       = metrics.NewCounter(`sluice_embedded_write_stalls_total`)
	writeStallSeconds = metrics.NewFloatCounter(`sluice_embedded_write_stall_seconds_total`)
)

// stallListener returns Pebble event callbacks that count write stalls and log
// them, and log each flush and compaction at debug level: their timing, set
// beside a latency timeline, tells which background work a tail came from.
//
// They also run each flush and compaction at a lower CPU priority
// (procs.Background): Pebble starts a goroutine for each and calls FlushBegin and
// CompactionBegin on it. A 64 MiB memtable's flush computes for 0.6 s; on the
// 2-core bench machine it was the tail of embedded 100-point batches at half of
// peak (each flush matched a 0.8 s stretch of p99 10-50 ms in a 100 ms latency
// timeline), and demoted it halved that cell's p99 (bench/RESULTS.md, "Background
// work at lower priority"). The request path's own Pebble work (the commit, the
// log's fdatasync) stays at normal priority.
func stallListener(log *slog.Logger) *pebble.EventListener {
	var mu sync.Mutex
	var began time.Time
	var reason string
	return &pebble.EventListener{
		WriteStallBegin: func(i pebble.WriteStallBeginInfo) {
			mu.Lock()
			began, reason = time.Now(), i.Reason
			mu.Unlock()
			writeStalls.Inc()
		},
		WriteStallEnd: func() {
			mu.Lock()
			d, why := time.Since(began), reason
			mu.Unlock()
			writeStallSeconds.Add(d.Seconds())
			log.Warn("storage stopped writes while it caught up; acknowledgements waited", "reason", why, "duration", d)
		},
		FlushBegin:      func(pebble.FlushInfo) { procs.Background() },
		CompactionBegin: func(pebble.CompactionInfo) { procs.Background() },
		FlushEnd: func(i pebble.FlushInfo) {
			if !log.Enabled(context.Background(), slog.LevelDebug) {
				return
			}
			var out uint64
			for _, t := range i.Output {
				out += t.Size
			}
			log.Debug("storage flushed memtables", "memtables", i.Input, "bytes_in", i.InputBytes, "bytes_out", out,
				"duration", i.Duration, "total", i.TotalDuration, "err", i.Err)
		},
		CompactionEnd: func(i pebble.CompactionInfo) {
			if !log.Enabled(context.Background(), slog.LevelDebug) {
				return
			}
			var in uint64
			for _, l := range i.Input {
				for _, t := range l.Tables {
					in += t.Size
				}
			}
			var out uint64
			for _, t := range i.Output.Tables {
				out += t.Size
			}
			log.Debug("storage compacted tables", "reason", i.Reason, "to_level", i.Output.Level, "bytes_in", in, "bytes_out", out,
				"duration", i.Duration, "total", i.TotalDuration, "err", i.Err)
		},
	}
}
