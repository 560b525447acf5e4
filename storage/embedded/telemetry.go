package embedded

import (
	"context"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// Latest implements storage.Telemetry.
func (d *DB) Latest(ctx context.Context, entityID uuid.UUID, keys []string) ([]kv.Entry, error) {
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	defer d.leave()
	if keys == nil {
		return d.allLatest(entityID)
	}
	var out []kv.Entry
	var key []byte
	for _, k := range keys {
		key = latestKey(key[:0], entityID, k)
		v, ok, err := get(d.pdb, key)
		if err != nil {
			return nil, fmt.Errorf("cannot read latest %q of %s: %w", k, entityID, err)
		}
		if !ok {
			continue
		}
		e, err := decodeEntry(k, v)
		if err != nil {
			return nil, fmt.Errorf("latest %q of %s: %w", k, entityID, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func (d *DB) allLatest(entityID uuid.UUID) ([]kv.Entry, error) {
	prefix := entityPrefix(nil, tableLatest, entityID)
	var out []kv.Entry
	err := scan(d.pdb, prefix, func(k, v []byte) error {
		e, err := decodeEntry(string(k[len(prefix):]), v)
		out = append(out, e)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read latest values of %s: %w", entityID, err)
	}
	return out, nil
}

// SeriesKeys implements storage.Telemetry.
func (d *DB) SeriesKeys(ctx context.Context, entityID uuid.UUID) ([]string, error) {
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	defer d.leave()
	prefix := entityPrefix(nil, tableLatest, entityID)
	var out []string
	err := scan(d.pdb, prefix, func(k, _ []byte) error {
		out = append(out, string(k[len(prefix):]))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list series of %s: %w", entityID, err)
	}
	return out, nil
}

// DeleteSeries implements storage.Telemetry. As in ThingsBoard, the latest value is
// deleted (and maybe rewritten) only when its ts falls inside [StartTs, EndTs).
func (d *DB) DeleteSeries(ctx context.Context, q storage.DeleteQuery) error {
	if err := d.enter(ctx); err != nil {
		return err
	}
	defer d.leave()
	defer d.lockEntity(q.EntityID)()

	b := d.pdb.NewBatch()
	defer b.Close()
	for _, k := range q.Keys {
		if err := d.deleteRange(b, q.EntityID, k, q.StartTs, q.EndTs); err != nil {
			return fmt.Errorf("cannot delete %q of %s: %w", k, q.EntityID, err)
		}
		if !q.DeleteLatest {
			continue
		}
		if err := d.deleteLatest(ctx, b, q, k); err != nil {
			return fmt.Errorf("cannot delete latest %q of %s: %w", k, q.EntityID, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("cannot delete series of %s: %w", q.EntityID, err)
	}
	return nil
}

// deleteRange adds to b the deletion of the points of a series in [start, end):
// a range deletion of the windows inside, and a rewrite of the first and last
// windows without the points in the range.
func (d *DB) deleteRange(b *pebble.Batch, entity uuid.UUID, key string, start, end int64) error {
	if start >= end {
		return nil
	}
	first, last := windowOf(start), windowOf(end-1)
	if err := d.rewriteWindow(b, entity, key, first, start, end); err != nil || first == last {
		return err
	}
	if first+windowMs < last {
		lo := windowKey(nil, entity, key, first+windowMs)
		hi := windowKey(nil, entity, key, last)
		if err := b.DeleteRange(lo, hi, nil); err != nil {
			return err
		}
	}
	return d.rewriteWindow(b, entity, key, last, start, end)
}

// rewriteWindow adds to b the window's value without the points in [start, end),
// as one chunk, or its deletion when no point is left. The caller holds the
// entity's lock, so no Write merges into the window in between.
func (d *DB) rewriteWindow(b *pebble.Batch, entity uuid.UUID, key string, window, start, end int64) error {
	k := windowKey(nil, entity, key, window)
	raw, ok, err := get(d.pdb, k)
	if err != nil || !ok {
		return err
	}
	pts, err := decodeWindow(nil, window, raw)
	if err != nil {
		return err
	}
	kept := pts[:0]
	for _, p := range pts {
		if p.ts < start || p.ts >= end {
			kept = append(kept, p)
		}
	}
	if len(kept) == len(pts) {
		return nil
	}
	if len(kept) == 0 {
		return b.Delete(k, nil)
	}
	return b.Set(k, appendChunk(nil, window, kept), nil)
}

// deleteLatest adds to b the deletion or rewrite of the latest value of key.
// It reads history from the DB, which does not yet see b's deletions, so it skips
// [StartTs, EndTs) itself.
func (d *DB) deleteLatest(ctx context.Context, b *pebble.Batch, q storage.DeleteQuery, key string) error {
	lk := latestKey(nil, q.EntityID, key)
	ts, ok, err := latestTs(d.pdb, lk)
	if err != nil || !ok || ts < q.StartTs || ts >= q.EndTs {
		return err
	}
	if !q.RewriteLatest {
		return b.Delete(lk, nil)
	}
	// The newest point outside the deleted range takes the latest value's place:
	// one after the range (rare: the latest is normally the newest point), else
	// the newest one before it.
	var found *point
	newest := func(p point) bool {
		found = &p
		return false
	}
	if q.EndTs < math.MaxInt64 {
		if err := scanSeries(ctx, d.pdb, q.EntityID, key, q.EndTs, math.MaxInt64, true, newest); err != nil {
			return err
		}
	}
	if found == nil {
		if err := scanSeries(ctx, d.pdb, q.EntityID, key, math.MinInt64, q.StartTs, true, newest); err != nil {
			return err
		}
	}
	if found == nil {
		return b.Delete(lk, nil)
	}
	return b.Set(lk, appendStamped(nil, found.ts, found.v), nil)
}

// DeleteEntitySeries implements storage.Telemetry.
func (d *DB) DeleteEntitySeries(ctx context.Context, entityID uuid.UUID) error {
	if err := d.enter(ctx); err != nil {
		return err
	}
	defer d.leave()
	defer d.lockEntity(entityID)()

	b := d.pdb.NewBatch()
	defer b.Close()
	for _, table := range []byte{tableSeries, tableLatest} {
		p := entityPrefix(nil, table, entityID)
		if err := b.DeleteRange(p, prefixEnd(p), nil); err != nil {
			return fmt.Errorf("cannot delete series of %s: %w", entityID, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("cannot delete series of %s: %w", entityID, err)
	}
	return nil
}

// scan calls f for every key with prefix, in key order. k and v are valid only
// during the call.
func scan(r pebble.Reader, prefix []byte, f func(k, v []byte) error) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			break
		}
		if err := f(it.Key(), v); err != nil {
			it.Close()
			return err
		}
	}
	return it.Close()
}
