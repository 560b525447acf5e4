package embedded

import (
	"context"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"
)

// pointsPool holds the decode buffers of scanSeries: one window's points.
var pointsPool = sync.Pool{New: func() any { return new([]point) }}

// scanSeries calls f for every point of one series with start <= ts < end, in
// ascending ts order (descending when desc), until f returns false. f may keep
// the point: its strings are its own.
func scanSeries(ctx context.Context, r pebble.Reader, entity uuid.UUID, key string, start, end int64, desc bool, f func(point) bool) error {
	if start >= end {
		return nil
	}
	prefix := seriesPrefix(nil, entity, key)
	lower := appendTs(slices.Clip(prefix), windowOf(start))
	upper := prefixEnd(prefix)
	if w := windowOf(end - 1); !lastWindow(w) {
		upper = appendTs(slices.Clip(prefix), w+windowMs)
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	buf := pointsPool.Get().(*[]point)
	pts := *buf
	defer func() {
		clear(pts)
		*buf = pts[:0]
		pointsPool.Put(buf)
	}()
	seen := 0
	valid := it.First()
	if desc {
		valid = it.Last()
	}
	for ; valid; valid = step(it, desc) {
		raw, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		clear(pts)
		if pts, err = decodeWindow(pts[:0], decodeTs(it.Key()[len(prefix):]), raw); err != nil {
			it.Close()
			return err
		}
		// Only the first and last windows can hold points outside the range.
		lo, _ := slices.BinarySearchFunc(pts, start, func(p point, ts int64) int { return cmpTs(p.ts, ts) })
		hi, _ := slices.BinarySearchFunc(pts, end, func(p point, ts int64) int { return cmpTs(p.ts, ts) })
		for i := range hi - lo {
			j := lo + i
			if desc {
				j = hi - 1 - i
			}
			if !f(pts[j]) {
				return it.Close()
			}
		}
		if seen += len(pts); seen >= ctxCheckEvery {
			seen = 0
			if err := ctx.Err(); err != nil {
				it.Close()
				return err
			}
		}
	}
	return it.Close()
}

func step(it *pebble.Iterator, desc bool) bool {
	if desc {
		return it.Prev()
	}
	return it.Next()
}

func cmpTs(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
