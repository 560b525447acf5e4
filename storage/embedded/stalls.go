package embedded

import (
	"log/slog"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/cockroachdb/pebble/v2"
)

// Pebble stops writes when flushes or compactions fall behind (too many
// memtables waiting, too many L0 files). Every acknowledgement waits meanwhile,
// so a stall is a latency spike of its whole length: counted and logged, with
// Pebble's reason, to tell one from the background work's CPU in a tail.
var (
	writeStalls       = metrics.NewCounter(`sluice_embedded_write_stalls_total`)
	writeStallSeconds = metrics.NewFloatCounter(`sluice_embedded_write_stall_seconds_total`)
)

// stallListener returns Pebble event callbacks that count write stalls.
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
	}
}
