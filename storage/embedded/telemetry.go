package embedded

import (
	"context"
	"fmt"

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
		if q.StartTs < q.EndTs {
			lo := historyKey(nil, q.EntityID, k, q.StartTs)
			hi := historyKey(nil, q.EntityID, k, q.EndTs)
			if err := b.DeleteRange(lo, hi, nil); err != nil {
				return fmt.Errorf("cannot delete %q of %s: %w", k, q.EntityID, err)
			}
		}
		if !q.DeleteLatest {
			continue
		}
		if err := d.deleteLatest(b, q, k); err != nil {
			return fmt.Errorf("cannot delete latest %q of %s: %w", k, q.EntityID, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("cannot delete series of %s: %w", q.EntityID, err)
	}
	return nil
}

// deleteLatest adds to b the deletion or rewrite of the latest value of key.
// It reads history from the DB, which does not yet see b's range deletion, so it
// skips [StartTs, EndTs) itself.
func (d *DB) deleteLatest(b *pebble.Batch, q storage.DeleteQuery, key string) error {
	lk := latestKey(nil, q.EntityID, key)
	ts, ok, err := latestTs(d.pdb, lk)
	if err != nil || !ok || ts < q.StartTs || ts >= q.EndTs {
		return err
	}
	if !q.RewriteLatest {
		return b.Delete(lk, nil)
	}
	prefix := seriesPrefix(nil, q.EntityID, key)
	it, err := d.pdb.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	defer it.Close()
	valid := it.Last()
	if valid {
		// When the newest point is in the deleted range, the newest one before
		// StartTs takes its place.
		if t := decodeTs(it.Key()[len(prefix):]); t >= q.StartTs && t < q.EndTs {
			valid = it.SeekLT(historyKey(nil, q.EntityID, key, q.StartTs))
		}
	}
	if !valid {
		if err := it.Error(); err != nil {
			return err
		}
		return b.Delete(lk, nil)
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return err
	}
	stamped := appendStampedRaw(nil, decodeTs(it.Key()[len(prefix):]), v)
	return b.Set(lk, stamped, nil)
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
	for _, table := range []byte{tableHistory, tableLatest} {
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
