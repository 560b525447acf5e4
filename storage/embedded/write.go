package embedded

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// series names one time series within a Write call.
type series struct {
	entity uuid.UUID
	key    string
}

// writer is the scratch state of one Write call, pooled across calls.
type writer struct {
	// newest maps each series of the call to its row with the newest ts.
	newest  map[series]int
	stripes [stripeCount / 64]uint64
	key     []byte
	val     []byte
}

var writerPool = sync.Pool{New: func() any { return &writer{newest: map[series]int{}} }}

func (w *writer) reset() {
	clear(w.newest)
	w.stripes = [stripeCount / 64]uint64{}
	w.key = w.key[:0]
	w.val = w.val[:0]
}

// Write stores rows in one synced batch. History points are plain puts (a second
// write of the same ts replaces the first); the latest value of a series is replaced
// only by a row with a ts at least as new, checked under the entity's stripe lock so
// concurrent writers of one entity cannot lose the newest value.
func (d *DB) Write(ctx context.Context, rows []storage.Row) error {
	if len(rows) == 0 {
		return ctx.Err()
	}
	if err := d.enter(ctx); err != nil {
		return err
	}
	defer d.leave()

	w := writerPool.Get().(*writer)
	defer func() {
		w.reset()
		writerPool.Put(w)
	}()
	for i := range rows {
		r := &rows[i]
		s := series{r.EntityID, r.Key}
		// >= keeps the later row on equal ts.
		if j, ok := w.newest[s]; !ok || r.Ts >= rows[j].Ts {
			w.newest[s] = i
		}
		n := stripeOf(r.EntityID)
		w.stripes[n/64] |= 1 << (n % 64)
	}
	d.lockStripes(&w.stripes)
	defer d.unlockStripes(&w.stripes)

	b := d.pdb.NewBatch()
	defer b.Close()
	for i := range rows {
		r := &rows[i]
		w.key = historyKey(w.key[:0], r.EntityID, r.Key, r.Ts)
		w.val = appendValue(w.val[:0], r.Value)
		if err := b.Set(w.key, w.val, nil); err != nil {
			return fmt.Errorf("cannot write telemetry: %w", err)
		}
	}
	for s, i := range w.newest {
		r := &rows[i]
		w.key = latestKey(w.key[:0], s.entity, s.key)
		ts, ok, err := latestTs(d.pdb, w.key)
		if err != nil {
			return fmt.Errorf("cannot read latest %q of %s: %w", s.key, s.entity, err)
		}
		if ok && ts > r.Ts {
			continue
		}
		w.val = appendStamped(w.val[:0], r.Ts, r.Value)
		if err := b.Set(w.key, w.val, nil); err != nil {
			return fmt.Errorf("cannot write telemetry: %w", err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("cannot commit %d telemetry rows: %w", len(rows), err)
	}
	return nil
}

// latestTs returns the ts of the stored latest value at key.
func latestTs(r pebble.Reader, key []byte) (int64, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer closer.Close()
	ts, err := stampedTs(v)
	return ts, err == nil, err
}

// lockStripes locks every stripe in the set in ascending order, which rules out
// deadlock between writers of overlapping entity sets.
func (d *DB) lockStripes(set *[stripeCount / 64]uint64) {
	for word, v := range set {
		for v != 0 {
			d.stripes[word*64+bits.TrailingZeros64(v)].Lock()
			v &= v - 1
		}
	}
}

func (d *DB) unlockStripes(set *[stripeCount / 64]uint64) {
	for word, v := range set {
		for v != 0 {
			d.stripes[word*64+bits.TrailingZeros64(v)].Unlock()
			v &= v - 1
		}
	}
}
