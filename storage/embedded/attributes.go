package embedded

import (
	"context"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// SaveAttributes implements storage.Attributes.
func (d *DB) SaveAttributes(ctx context.Context, entityID uuid.UUID, scope storage.Scope, attrs []kv.Entry) error {
	if len(attrs) == 0 {
		return ctx.Err()
	}
	if err := d.enterWrite(ctx); err != nil {
		return err
	}
	defer d.leave()
	// The stripe lock keeps DeleteAttributes' report of existing keys exact.
	defer d.lockEntity(entityID)()

	b := d.pdb.NewBatch()
	defer b.Close()
	var key, val []byte
	for _, a := range attrs {
		key = attrKey(key[:0], entityID, scope, a.Key)
		val = appendStamped(val[:0], a.Ts, a.Value)
		if err := b.Set(key, val, nil); err != nil {
			return fmt.Errorf("cannot save attributes of %s: %w", entityID, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("cannot save %d attributes of %s: %w", len(attrs), entityID, err)
	}
	return nil
}

// SaveAttributesOf implements storage.Attributes: one batch, one sync.
func (d *DB) SaveAttributesOf(ctx context.Context, scope storage.Scope, writes []storage.EntityAttributes) error {
	if len(writes) == 0 {
		return ctx.Err()
	}
	if err := d.enterWrite(ctx); err != nil {
		return err
	}
	defer d.leave()
	// Each entity's stripe, as SaveAttributes takes it; in stripe order, each
	// once, so two of these cannot deadlock.
	var held [stripeCount]bool
	for _, w := range writes {
		held[stripeOf(w.EntityID)] = true
	}
	for i := range held {
		if held[i] {
			d.stripes[i].Lock()
			defer d.stripes[i].Unlock()
		}
	}
	b := d.pdb.NewBatch()
	defer b.Close()
	var key, val []byte
	for _, w := range writes {
		for _, a := range w.Attrs {
			key = attrKey(key[:0], w.EntityID, scope, a.Key)
			val = appendStamped(val[:0], a.Ts, a.Value)
			if err := b.Set(key, val, nil); err != nil {
				return fmt.Errorf("cannot save attributes of %s: %w", w.EntityID, err)
			}
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("cannot save the attributes of %d entities: %w", len(writes), err)
	}
	return nil
}

// GetAttributes implements storage.Attributes.
func (d *DB) GetAttributes(ctx context.Context, entityID uuid.UUID, scope storage.Scope, keys []string) ([]kv.Entry, error) {
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	defer d.leave()
	var out []kv.Entry
	if keys == nil {
		prefix := attrPrefix(nil, entityID, scope)
		err := scan(d.pdb, prefix, func(k, v []byte) error {
			e, err := decodeEntry(string(k[len(prefix):]), v)
			out = append(out, e)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("cannot read %s attributes of %s: %w", scope, entityID, err)
		}
		return out, nil
	}
	var key []byte
	for _, k := range sortedUnique(keys) {
		key = attrKey(key[:0], entityID, scope, k)
		v, ok, err := get(d.pdb, key)
		if err != nil {
			return nil, fmt.Errorf("cannot read attribute %q of %s: %w", k, entityID, err)
		}
		if !ok {
			continue
		}
		e, err := decodeEntry(k, v)
		if err != nil {
			return nil, fmt.Errorf("attribute %q of %s: %w", k, entityID, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// DeleteAttributes implements storage.Attributes.
func (d *DB) DeleteAttributes(ctx context.Context, entityID uuid.UUID, scope storage.Scope, keys []string) ([]string, error) {
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	defer d.leave()
	defer d.lockEntity(entityID)()

	b := d.pdb.NewBatch()
	defer b.Close()
	var existed []string
	for _, k := range sortedUnique(keys) {
		key := attrKey(nil, entityID, scope, k)
		_, ok, err := get(d.pdb, key)
		if err != nil {
			return nil, fmt.Errorf("cannot read attribute %q of %s: %w", k, entityID, err)
		}
		if !ok {
			continue
		}
		existed = append(existed, k)
		if err := b.Delete(key, nil); err != nil {
			return nil, fmt.Errorf("cannot delete attribute %q of %s: %w", k, entityID, err)
		}
	}
	if len(existed) == 0 {
		return nil, nil
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return nil, fmt.Errorf("cannot delete attributes of %s: %w", entityID, err)
	}
	return existed, nil
}

// DeleteEntityAttributes implements storage.Attributes.
func (d *DB) DeleteEntityAttributes(ctx context.Context, entityID uuid.UUID) error {
	if err := d.enter(ctx); err != nil {
		return err
	}
	defer d.leave()
	defer d.lockEntity(entityID)()

	p := entityPrefix(nil, tableAttribute, entityID)
	if err := d.pdb.DeleteRange(p, prefixEnd(p), pebble.Sync); err != nil {
		return fmt.Errorf("cannot delete attributes of %s: %w", entityID, err)
	}
	return nil
}

// sortedUnique returns a sorted copy of keys without duplicates.
func sortedUnique(keys []string) []string {
	s := slices.Clone(keys)
	slices.Sort(s)
	return slices.Compact(s)
}
