package embedded

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/series"
	"github.com/sluice-iot/sluice/storage"
)

// group is what a Write call holds for one series: its row with the newest ts and
// where its rows sit in writer.order.
type group struct {
	entity uuid.UUID
	key    string
	newest int
	count  int
	start  int
	sorted bool // the series' rows come in nondecreasing ts order
}

// writer is the scratch state of one Write call, pooled across calls.
type writer struct {
	index   series.Index // numbers the series: a series' number is its position in groups
	groups  []group
	slot    []int32 // slot[i] is the position in groups of row i's series
	byKey   []int32 // positions in groups, in key order
	order   []int32 // row numbers in history key order
	pts     []point // one chunk's points
	stripes [stripeCount / 64]uint64
	key     []byte
	val     []byte
}

var writerPool = sync.Pool{New: func() any { return new(writer) }}

func (w *writer) reset() {
	w.index.Reset()
	clear(w.groups) // drop the key strings, which may alias request memory
	w.groups = w.groups[:0]
	w.slot = w.slot[:0]
	w.byKey = w.byKey[:0]
	w.order = w.order[:0]
	clear(w.pts) // the strings may alias request memory too
	w.pts = w.pts[:0]
	w.stripes = [stripeCount / 64]uint64{}
	w.key = w.key[:0]
	w.val = w.val[:0]
}

// plan groups rows by series and fills w.order with the row numbers sorted by
// series and then ts, stably: rows with the same (entity, key, ts) keep their
// order, so the later one wins. Series in key order matter for speed: Pebble's
// memtable insert reuses the position of the previous key, so keys that arrive in
// order cost about one comparison each instead of a walk down the skiplist (that
// walk was about 40% of the CPU of a 10,000-row Write when every point was a key;
// see bench/RESULTS.md).
func (w *writer) plan(rows []storage.Row) {
	for i := range rows {
		r := &rows[i]
		g, added := w.index.Of(r.EntityID, r.Key)
		if added {
			w.groups = append(w.groups, group{entity: r.EntityID, key: r.Key, newest: i, sorted: true})
		}
		p := &w.groups[g]
		// >= keeps the later row on equal ts.
		if r.Ts >= rows[p.newest].Ts {
			p.newest = i
		} else {
			p.sorted = false
		}
		p.count++
		w.slot = append(w.slot, int32(g))
		n := stripeOf(r.EntityID)
		w.stripes[n/64] |= 1 << (n % 64)
	}
	for g := range w.groups {
		w.byKey = append(w.byKey, int32(g))
	}
	slices.SortFunc(w.byKey, func(a, b int32) int {
		x, y := &w.groups[a], &w.groups[b]
		if c := bytes.Compare(x.entity[:], y.entity[:]); c != 0 {
			return c
		}
		// Escaped keys sort as the originals do (keys.go).
		return strings.Compare(x.key, y.key)
	})
	start := 0
	for _, g := range w.byKey {
		w.groups[g].start = start
		start += w.groups[g].count
	}
	w.order = slices.Grow(w.order[:0], len(rows))[:len(rows)]
	for i := range rows {
		p := &w.groups[w.slot[i]]
		w.order[p.start] = int32(i)
		p.start++
	}
	for _, g := range w.byKey {
		p := &w.groups[g]
		p.start -= p.count
		if !p.sorted {
			// Each request's rows are one ascending run. The stable sort merges
			// such runs at about half the cost of pdqsort by (ts, row number)
			// (BenchmarkPlan: 20 against 41 ns a row).
			slices.SortStableFunc(w.order[p.start:p.start+p.count], func(a, b int32) int {
				return cmp.Compare(rows[a].Ts, rows[b].Ts)
			})
		}
	}
}

// Write stores rows in one synced batch. Each series' points go in as one chunk
// per window (chunk.go; a second write of a ts replaces the first when read). The
// latest value of a series is replaced only by a row with a ts at least as new,
// checked under the entity's stripe lock so concurrent writers of one entity
// cannot lose the newest value.
func (d *DB) Write(ctx context.Context, rows []storage.Row) error {
	if len(rows) == 0 {
		return ctx.Err()
	}
	if err := d.enterWrite(ctx); err != nil {
		return err
	}
	defer d.leave()

	w := writerPool.Get().(*writer)
	defer func() {
		w.reset()
		writerPool.Put(w)
	}()
	w.plan(rows)
	d.lockStripes(&w.stripes)
	defer d.unlockStripes(&w.stripes)

	b := d.pdb.NewBatch()
	defer b.Close()
	for _, g := range w.byKey {
		p := &w.groups[g]
		// The series' rows in ts order, one chunk per window they fall in.
		idx := w.order[p.start : p.start+p.count]
		for len(idx) > 0 {
			win := windowOf(rows[idx[0]].Ts)
			w.pts = w.pts[:0]
			n := 0
			for ; n < len(idx) && windowOf(rows[idx[n]].Ts) == win; n++ {
				r := &rows[idx[n]]
				if k := len(w.pts) - 1; k >= 0 && w.pts[k].ts == r.Ts {
					w.pts[k].v = r.Value // the later row of a ts wins
					continue
				}
				w.pts = append(w.pts, point{r.Ts, r.Value})
			}
			idx = idx[n:]
			w.key = windowKey(w.key[:0], p.entity, p.key, win)
			w.val = appendChunk(w.val[:0], win, w.pts)
			if err := b.Merge(w.key, w.val, nil); err != nil {
				return fmt.Errorf("cannot write telemetry: %w", err)
			}
		}
	}
	for _, g := range w.byKey {
		p := &w.groups[g]
		r := &rows[p.newest]
		w.key = latestKey(w.key[:0], p.entity, p.key)
		ts, ok, err := latestTs(d.pdb, w.key)
		if err != nil {
			return fmt.Errorf("cannot read latest %q of %s: %w", p.key, p.entity, err)
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
