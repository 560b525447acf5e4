// Package version hands out write versions: nanoseconds since the epoch,
// strictly increasing within the process even when the wall clock stalls or
// steps back. A version orders writes of the same point (the later one wins)
// and places a write before or after a delete. Versions are taken when a write
// is acknowledged, not when it reaches ClickHouse, so a spool's delay changes
// neither; across nodes they are as good as the clocks' synchronisation. One
// clock per process: the spool's writes and the history store's deletes must
// draw from the same one.
package version

import (
	"sync/atomic"
	"time"
)

var last atomic.Uint64

// Reserve reserves n consecutive versions and returns the first.
func Reserve(n int) uint64 {
	for {
		l := last.Load()
		base := max(uint64(time.Now().UnixNano()), l+1)
		if last.CompareAndSwap(l, base+uint64(max(n, 1))-1) {
			return base
		}
	}
}
