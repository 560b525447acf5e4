package embedded

import (
	"context"
	"fmt"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

const defaultLimit = 100

// Read implements storage.Telemetry. It streams the range once, forwards for
// ascending and backwards for descending order, folding points into the current
// bucket as it goes, so memory is bounded by the result and one window.
func (d *DB) Read(ctx context.Context, q storage.ReadQuery) ([]kv.Entry, error) {
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	defer d.leave()
	var (
		out []kv.Entry
		err error
	)
	if !q.Aggregated() {
		out, err = d.readRaw(ctx, q)
	} else {
		out, err = d.readAgg(ctx, q)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read %q of %s: %w", q.Key, q.EntityID, err)
	}
	return out, nil
}

// ctxCheckEvery is how many points a read visits between checks for cancellation.
const ctxCheckEvery = 4096

func (d *DB) readRaw(ctx context.Context, q storage.ReadQuery) ([]kv.Entry, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	var out []kv.Entry
	err := scanSeries(ctx, d.pdb, q.EntityID, q.Key, q.StartTs, q.EndTs, !q.Asc, func(p point) bool {
		out = append(out, kv.Entry{Ts: p.ts, Key: q.Key, Value: p.v})
		return len(out) < limit
	})
	return out, err
}

func (d *DB) readAgg(ctx context.Context, q storage.ReadQuery) ([]kv.Entry, error) {
	var (
		out []kv.Entry
		acc = accumulator{agg: q.Agg}
		cur int64 // start of the bucket acc holds
	)
	flush := func() {
		if v, ok := acc.result(); ok {
			out = append(out, kv.Entry{Ts: midpoint(cur, q), Key: q.Key, Value: v})
		}
		acc = accumulator{agg: q.Agg}
	}
	err := scanSeries(ctx, d.pdb, q.EntityID, q.Key, q.StartTs, q.EndTs, !q.Asc, func(p point) bool {
		start := bucketStart(p.ts, q)
		if acc.count > 0 && start != cur {
			flush()
		}
		cur = start
		acc.add(p.v)
		return true
	})
	if err != nil {
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
	if len(q.Edges) > 1 {
		return q.Edges[storage.EdgeBucket(q.Edges, ts)]
	}
	off := uint64(ts - q.StartTs)
	return q.StartTs + int64(off-off%uint64(q.Interval))
}

// midpoint is the ts ThingsBoard gives the bucket starting at start: the middle of
// the bucket clipped to the range end.
func midpoint(start int64, q storage.ReadQuery) int64 {
	if len(q.Edges) > 1 {
		return storage.EdgeMid(q.Edges, storage.EdgeBucket(q.Edges, start))
	}
	width := uint64(q.Interval)
	if rest := uint64(q.EndTs - start); rest < width {
		width = rest
	}
	return start + int64(width/2)
}
