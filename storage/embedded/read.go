package embedded

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

const defaultLimit = 100

// Read implements storage.Telemetry. It streams the range once, forwards for
// ascending and backwards for descending order, folding points into the current
// bucket as it goes, so memory is bounded by the result.
func (d *DB) Read(ctx context.Context, q storage.ReadQuery) ([]kv.Entry, error) {
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	defer d.leave()
	if q.StartTs >= q.EndTs {
		return nil, nil
	}
	prefix := seriesPrefix(nil, q.EntityID, q.Key)
	it, err := d.pdb.NewIter(&pebble.IterOptions{
		LowerBound: appendTs(prefix, q.StartTs),
		UpperBound: historyKey(nil, q.EntityID, q.Key, q.EndTs),
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read %q of %s: %w", q.Key, q.EntityID, err)
	}
	var out []kv.Entry
	if q.Agg == storage.AggNone || q.Interval <= 0 {
		out, err = readRaw(ctx, it, q, len(prefix))
	} else {
		out, err = readAgg(ctx, it, q, len(prefix))
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read %q of %s: %w", q.Key, q.EntityID, err)
	}
	return out, nil
}

// ctxCheckEvery is how many points a read visits between checks for cancellation.
const ctxCheckEvery = 4096

// step positions it on the first point (first == true) or the next one, in the
// query's order.
func step(it *pebble.Iterator, asc, first bool) bool {
	switch {
	case asc && first:
		return it.First()
	case asc:
		return it.Next()
	case first:
		// With an upper bound set, Last is SeekLT(upper bound).
		return it.Last()
	}
	return it.Prev()
}

func readRaw(ctx context.Context, it *pebble.Iterator, q storage.ReadQuery, prefixLen int) ([]kv.Entry, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	var out []kv.Entry
	for valid := step(it, q.Asc, true); valid && len(out) < limit; valid = step(it, q.Asc, false) {
		raw, err := it.ValueAndErr()
		if err != nil {
			return nil, err
		}
		v, err := decodeValue(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, kv.Entry{Ts: decodeTs(it.Key()[prefixLen:]), Key: q.Key, Value: v})
		if len(out)%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	return out, it.Error()
}

func readAgg(ctx context.Context, it *pebble.Iterator, q storage.ReadQuery, prefixLen int) ([]kv.Entry, error) {
	var (
		out  []kv.Entry
		acc  = accumulator{agg: q.Agg}
		cur  int64 // start of the bucket acc holds
		seen int
	)
	flush := func() {
		if v, ok := acc.result(); ok {
			out = append(out, kv.Entry{Ts: midpoint(cur, q), Key: q.Key, Value: v})
		}
		acc = accumulator{agg: q.Agg}
	}
	for valid := step(it, q.Asc, true); valid; valid = step(it, q.Asc, false) {
		raw, err := it.ValueAndErr()
		if err != nil {
			return nil, err
		}
		v, err := decodeValue(raw)
		if err != nil {
			return nil, err
		}
		start := bucketStart(decodeTs(it.Key()[prefixLen:]), q)
		if acc.count > 0 && start != cur {
			flush()
		}
		cur = start
		acc.add(v)
		if seen++; seen%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if acc.count > 0 {
		flush()
	}
	return out, nil
}

// bucketStart returns the start of the bucket holding ts. The arithmetic is
// unsigned so that a range spanning most of int64 cannot overflow.
func bucketStart(ts int64, q storage.ReadQuery) int64 {
	off := uint64(ts - q.StartTs)
	return q.StartTs + int64(off-off%uint64(q.Interval))
}

// midpoint is the ts ThingsBoard gives the bucket starting at start: the middle of
// the bucket clipped to the range end.
func midpoint(start int64, q storage.ReadQuery) int64 {
	width := uint64(q.Interval)
	if rest := uint64(q.EndTs - start); rest < width {
		width = rest
	}
	return start + int64(width/2)
}
