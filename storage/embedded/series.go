package embedded

import (
	"context"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"
)

// refsPool holds the buffers of scanSeries: one window's points.
var refsPool = sync.Pool{New: func() any { return new([]ref) }}

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
	buf := refsPool.Get().(*[]ref)
	refs := *buf
	defer func() {
		*buf = refs[:0]
		refsPool.Put(buf)
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
		if refs, err = scanWindow(refs[:0], decodeTs(it.Key()[len(prefix):]), raw); err != nil {
			it.Close()
			return err
		}
		// Only the first and last windows can hold points outside the range.
		lo, _ := slices.BinarySearchFunc(refs, start, func(r ref, ts int64) int { return cmpTs(r.ts, ts) })
		hi, _ := slices.BinarySearchFunc(refs, end, func(r ref, ts int64) int { return cmpTs(r.ts, ts) })
		for i := range hi - lo {
			j := lo + i
			if desc {
				j = hi - 1 - i
			}
			if !f(point{refs[j].ts, valueAt(raw, refs[j])}) {
				return it.Close()
			}
		}
		if seen += len(refs); seen >= ctxCheckEvery {
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
