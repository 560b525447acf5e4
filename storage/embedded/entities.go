package embedded

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// Put implements storage.Entities. The record, its unique values and its owner
// index change in one synced batch, after the unique check, under d.entities.
func (d *DB) Put(ctx context.Context, r storage.Record) error {
	return d.put(ctx, r, nil)
}

// Replace implements storage.Entities.
func (d *DB) Replace(ctx context.Context, r storage.Record, prev []byte) error {
	return d.put(ctx, r, &prev)
}

// put is Put, or Replace over *prev.
func (d *DB) put(ctx context.Context, r storage.Record, prev *[]byte) error {
	if err := d.enterWrite(ctx); err != nil {
		return err
	}
	defer d.leave()
	d.entities.Lock()
	defer d.entities.Unlock()

	old, found, err := getRecord(d.pdb, r.Kind, r.ID)
	if err != nil {
		return err
	}
	if prev != nil {
		if !found {
			return fmt.Errorf("cannot replace %s %s: %w", r.Kind, r.ID, storage.ErrNotFound)
		}
		if !bytes.Equal(old.Data, *prev) {
			return fmt.Errorf("cannot replace %s %s: %w", r.Kind, r.ID, storage.ErrChanged)
		}
	}
	for _, u := range r.Unique {
		v, ok, err := get(d.pdb, uniqueKey(nil, r.Kind, u))
		if err != nil {
			return fmt.Errorf("cannot check a unique value of %s: %w", r.Kind, err)
		}
		if !ok {
			continue
		}
		owner, err := parseID(v)
		if err != nil {
			return fmt.Errorf("a unique value of %s: %w", r.Kind, err)
		}
		if owner != r.ID {
			return fmt.Errorf("cannot put %s %s: a unique value of it belongs to %s: %w", r.Kind, r.ID, owner, storage.ErrConflict)
		}
	}

	// Batch.Set and Delete fail only past 4 GiB; a record's batch is tiny.
	b := d.pdb.NewBatch()
	defer b.Close()
	if found {
		for _, u := range old.Unique {
			if !slices.Contains(r.Unique, u) {
				b.Delete(uniqueKey(nil, r.Kind, u), nil)
			}
		}
		if old.Owner != r.Owner {
			b.Delete(ownerKey(nil, r.Kind, old.Owner, r.ID), nil)
		}
	}
	for _, u := range r.Unique {
		b.Set(uniqueKey(nil, r.Kind, u), r.ID[:], nil)
	}
	b.Set(ownerKey(nil, r.Kind, r.Owner, r.ID), nil, nil)
	b.Set(recordKey(nil, r.Kind, r.ID), appendRecord(nil, r), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("cannot put %s %s: %w", r.Kind, r.ID, err)
	}
	return nil
}

// Get implements storage.Entities.
func (d *DB) Get(ctx context.Context, kind string, id uuid.UUID) (storage.Record, error) {
	if err := d.enter(ctx); err != nil {
		return storage.Record{}, err
	}
	defer d.leave()
	r, found, err := getRecord(d.pdb, kind, id)
	if err != nil {
		return storage.Record{}, err
	}
	if !found {
		return storage.Record{}, fmt.Errorf("%s %s: %w", kind, id, storage.ErrNotFound)
	}
	return r, nil
}

// Lookup implements storage.Entities.
func (d *DB) Lookup(ctx context.Context, kind, unique string) (storage.Record, error) {
	if err := d.enter(ctx); err != nil {
		return storage.Record{}, err
	}
	defer d.leave()
	// A snapshot keeps the index entry and the record it points to consistent.
	snap := d.pdb.NewSnapshot()
	defer snap.Close()
	v, ok, err := get(snap, uniqueKey(nil, kind, unique))
	if err != nil {
		return storage.Record{}, fmt.Errorf("cannot look up %s: %w", kind, err)
	}
	if ok {
		id, err := parseID(v)
		if err != nil {
			return storage.Record{}, fmt.Errorf("a unique value of %s: %w", kind, err)
		}
		r, found, err := getRecord(snap, kind, id)
		if err != nil || found {
			return r, err
		}
	}
	return storage.Record{}, fmt.Errorf("%s: %w", kind, storage.ErrNotFound)
}

// List implements storage.Entities.
func (d *DB) List(ctx context.Context, kind string, owner uuid.UUID) ([]storage.Record, error) {
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	defer d.leave()
	snap := d.pdb.NewSnapshot()
	defer snap.Close()
	var ids []uuid.UUID
	prefix := ownerPrefix(nil, kind, owner)
	err := scan(snap, prefix, func(k, _ []byte) error {
		ids = append(ids, uuid.UUID(k[len(prefix):]))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list %s of %s: %w", kind, owner, err)
	}
	out := make([]storage.Record, 0, len(ids))
	for _, id := range ids {
		r, found, err := getRecord(snap, kind, id)
		if err != nil {
			return nil, err
		}
		if found {
			out = append(out, r)
		}
	}
	return out, nil
}

// Count implements storage.Entities: it walks the owner index, whose keys
// carry no value, and reads no record.
func (d *DB) Count(ctx context.Context, kind string, owner uuid.UUID) (int, error) {
	if err := d.enter(ctx); err != nil {
		return 0, err
	}
	defer d.leave()
	n := 0
	if err := scan(d.pdb, ownerPrefix(nil, kind, owner), func(_, _ []byte) error {
		n++
		return nil
	}); err != nil {
		return 0, fmt.Errorf("cannot count %s of %s: %w", kind, owner, err)
	}
	return n, nil
}

// Delete implements storage.Entities.
func (d *DB) Delete(ctx context.Context, kind string, id uuid.UUID) error {
	if err := d.enter(ctx); err != nil {
		return err
	}
	defer d.leave()
	d.entities.Lock()
	defer d.entities.Unlock()

	r, found, err := getRecord(d.pdb, kind, id)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("cannot delete %s %s: %w", kind, id, storage.ErrNotFound)
	}
	b := d.pdb.NewBatch()
	defer b.Close()
	for _, u := range r.Unique {
		b.Delete(uniqueKey(nil, kind, u), nil)
	}
	b.Delete(ownerKey(nil, kind, r.Owner, id), nil)
	b.Delete(recordKey(nil, kind, id), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("cannot delete %s %s: %w", kind, id, err)
	}
	return nil
}

func getRecord(r pebble.Reader, kind string, id uuid.UUID) (storage.Record, bool, error) {
	v, ok, err := get(r, recordKey(nil, kind, id))
	if err != nil {
		return storage.Record{}, false, fmt.Errorf("cannot read %s %s: %w", kind, id, err)
	}
	if !ok {
		return storage.Record{}, false, nil
	}
	rec, err := decodeRecord(kind, id, v)
	if err != nil {
		return storage.Record{}, false, fmt.Errorf("%s %s: %w", kind, id, err)
	}
	return rec, true, nil
}

func parseID(b []byte) (uuid.UUID, error) {
	if len(b) != len(uuid.UUID{}) {
		return uuid.Nil, fmt.Errorf("%w: id of %d bytes", errCorrupt, len(b))
	}
	return uuid.UUID(b), nil
}
