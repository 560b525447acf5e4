package embedded

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// Counters live in their own table (see keys.go):
//
//	c | entity | name               counter        → int64, 8 bytes big-endian
const tableCounter = 'c'

func counterPrefix(dst []byte, entity uuid.UUID) []byte {
	return entityPrefix(dst, tableCounter, entity)
}

func counterKey(dst []byte, entity uuid.UUID, name string) []byte {
	return append(counterPrefix(dst, entity), name...)
}

var _ storage.Counters = (*DB)(nil)

// AddCounters adds the deltas in one synced batch. The read-modify-write of each
// counter runs under its entity's stripe lock, so concurrent adds never lose one.
func (d *DB) AddCounters(ctx context.Context, deltas []storage.CounterDelta) error {
	if len(deltas) == 0 {
		return ctx.Err()
	}
	if err := d.enterWrite(ctx); err != nil {
		return err
	}
	defer d.leave()

	type counter struct {
		entity uuid.UUID
		name   string
	}
	sum := make(map[counter]int64, len(deltas))
	var stripes [stripeCount / 64]uint64
	for _, c := range deltas {
		sum[counter{c.EntityID, c.Name}] += c.Delta
		n := stripeOf(c.EntityID)
		stripes[n/64] |= 1 << (n % 64)
	}
	d.lockStripes(&stripes)
	defer d.unlockStripes(&stripes)

	b := d.pdb.NewBatch()
	defer b.Close()
	var key []byte
	for c, delta := range sum {
		key = counterKey(key[:0], c.entity, c.name)
		v, ok, err := get(d.pdb, key)
		if err != nil {
			return fmt.Errorf("cannot read counter %q of %s: %w", c.name, c.entity, err)
		}
		var n int64
		if ok && len(v) == 8 {
			n = int64(binary.BigEndian.Uint64(v))
		}
		if err := b.Set(key, binary.BigEndian.AppendUint64(nil, uint64(n+delta)), nil); err != nil {
			return fmt.Errorf("cannot write counters: %w", err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("cannot commit %d counters: %w", len(sum), err)
	}
	return nil
}

// DeleteCounters removes every counter of the entity in one synced range deletion.
func (d *DB) DeleteCounters(ctx context.Context, entityID uuid.UUID) error {
	if err := d.enter(ctx); err != nil {
		return err
	}
	defer d.leave()
	defer d.lockEntity(entityID)()
	p := counterPrefix(nil, entityID)
	if err := d.pdb.DeleteRange(p, prefixEnd(p), pebble.Sync); err != nil {
		return fmt.Errorf("cannot delete counters of %s: %w", entityID, err)
	}
	return nil
}

// Counters reads every counter of the entity.
func (d *DB) Counters(ctx context.Context, entityID uuid.UUID) (map[string]int64, error) {
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	defer d.leave()
	prefix := counterPrefix(nil, entityID)
	it, err := d.pdb.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for it.First(); it.Valid(); it.Next() {
		if v := it.Value(); len(v) == 8 {
			out[string(it.Key()[len(prefix):])] = int64(binary.BigEndian.Uint64(v))
		}
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("cannot read counters of %s: %w", entityID, err)
	}
	return out, nil
}
