package embedded

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// TestChunkedHistoryModel writes, overwrites and deletes points of a few series
// at random, across window boundaries and at both ends of int64, flushing and
// compacting Pebble in between (so chunks are merged in the memtable, by flushes
// and by compactions), and checks every read against a map.
func TestChunkedHistoryModel(t *testing.T) {
	db := open(t, t.TempDir())
	ctx := t.Context()
	rnd := rand.New(rand.NewPCG(7, 11))
	dev := uuid.New()
	keys := []string{"a", "a\x00", "b"}
	model := map[string]map[int64]kv.Value{}
	for _, k := range keys {
		model[k] = map[int64]kv.Value{}
	}
	// Timestamps cluster around a few window boundaries, so chunks, windows and
	// deletes meet at their edges.
	centres := []int64{math.MinInt64 + 5, windowOf(-1), 0, windowOf(1_700_000_000_000), windowOf(1_700_000_000_000) + 3*windowMs, math.MaxInt64 - 5}
	randTs := func() int64 {
		c := centres[rnd.IntN(len(centres))]
		d := rnd.Int64N(4*windowMs) - 2*windowMs
		if rnd.IntN(3) == 0 {
			d = rnd.Int64N(9) - 4
		}
		switch {
		case d < 0 && c < math.MinInt64-d:
			return math.MinInt64
		case d > 0 && c > math.MaxInt64-1-d:
			return math.MaxInt64 - 1
		}
		return c + d
	}
	check := func(step int) {
		t.Helper()
		for _, k := range keys {
			var want []kv.Entry
			for _, ts := range slices.Sorted(maps.Keys(model[k])) {
				want = append(want, kv.Entry{Ts: ts, Key: k, Value: model[k][ts]})
			}
			lo, hi := randTs(), randTs()
			if lo > hi {
				lo, hi = hi, lo
			}
			for _, q := range []struct{ start, end int64 }{{math.MinInt64, math.MaxInt64}, {lo, hi}} {
				var in []kv.Entry
				for _, e := range want {
					if e.Ts >= q.start && e.Ts < q.end {
						in = append(in, e)
					}
				}
				limit := len(in) + 1
				got, err := db.Read(ctx, storage.ReadQuery{EntityID: dev, Key: k, StartTs: q.start, EndTs: q.end, Limit: limit, Asc: true})
				if err != nil || fmt.Sprint(got) != fmt.Sprint(in) {
					t.Fatalf("step %d: %q in [%d, %d) ascending:\n got %v, %v\nwant %v", step, k, q.start, q.end, got, err, in)
				}
				got, err = db.Read(ctx, storage.ReadQuery{EntityID: dev, Key: k, StartTs: q.start, EndTs: q.end, Limit: 3})
				slices.Reverse(in)
				if len(in) > 3 {
					in = in[:3]
				}
				if err != nil || fmt.Sprint(got) != fmt.Sprint(in) {
					t.Fatalf("step %d: %q in [%d, %d) descending, 3:\n got %v, %v\nwant %v", step, k, q.start, q.end, got, err, in)
				}
			}
			latest, err := db.Latest(ctx, dev, []string{k})
			if err != nil {
				t.Fatal(err)
			}
			// Deleting the latest with a rewrite makes the newest point left the
			// latest; every delete here rewrites, so latest is the newest point.
			if len(want) == 0 && len(latest) != 0 || len(want) > 0 && (len(latest) != 1 || latest[0] != want[len(want)-1]) {
				t.Fatalf("step %d: latest %q = %v, want the newest of %d points", step, k, latest, len(want))
			}
		}
	}
	for step := range 400 {
		switch r := rnd.IntN(20); {
		case r < 14: // a Write of a few series, maybe repeating a ts
			var rows []storage.Row
			for range 1 + rnd.IntN(30) {
				k := keys[rnd.IntN(len(keys))]
				ts := randTs()
				if n := len(rows); n > 0 && rnd.IntN(4) == 0 {
					ts = rows[rnd.IntN(n)].Ts
				}
				v := kv.LongValue(rnd.Int64N(1000))
				if rnd.IntN(5) == 0 {
					v = kv.StringValue(fmt.Sprint("s", rnd.IntN(100)))
				}
				rows = append(rows, storage.Row{EntityID: dev, Entry: kv.Entry{Ts: ts, Key: k, Value: v}})
				model[k][ts] = v
			}
			if err := db.Write(ctx, rows); err != nil {
				t.Fatal(err)
			}
		case r < 17: // a range delete with the latest rewritten
			lo, hi := randTs(), randTs()
			if lo > hi {
				lo, hi = hi, lo
			}
			k := keys[rnd.IntN(len(keys))]
			q := storage.DeleteQuery{EntityID: dev, Keys: []string{k}, StartTs: lo, EndTs: hi, DeleteLatest: true, RewriteLatest: true}
			if err := db.DeleteSeries(ctx, q); err != nil {
				t.Fatal(err)
			}
			for ts := range model[k] {
				if ts >= lo && ts < hi {
					delete(model[k], ts)
				}
			}
		case r < 19:
			if err := db.pdb.Flush(); err != nil {
				t.Fatal(err)
			}
		default:
			if err := db.pdb.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
				t.Fatal(err)
			}
		}
		if step%10 == 0 {
			check(step)
		}
	}
	check(400)
}

// TestManyChunksOneWindow: a window that collected thousands of one-point chunks
// (a device posting one point per request) reads back in order before and after
// the memtable is flushed.
func TestManyChunksOneWindow(t *testing.T) {
	db := open(t, t.TempDir())
	ctx := t.Context()
	dev := uuid.New()
	base := windowOf(1_700_000_000_000)
	const n = 3000
	for i := range n {
		// Every tenth point comes late, into the middle of the window.
		const step = windowMs / (n + 1)
		ts := base + int64(i)*step
		if i%10 == 9 {
			ts -= step * 9 / 2
		}
		if err := db.Write(ctx, []storage.Row{{EntityID: dev, Entry: kv.Entry{Ts: ts, Key: "t", Value: kv.LongValue(int64(i))}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, when := range []string{"memtable", "flushed"} {
		got, err := db.Read(ctx, storage.ReadQuery{EntityID: dev, Key: "t", StartTs: base, EndTs: base + windowMs, Limit: 2 * n, Asc: true})
		if err != nil || len(got) != n {
			t.Fatalf("%s: %d points, %v; want %d", when, len(got), err, n)
		}
		for i := 1; i < n; i++ {
			if got[i].Ts <= got[i-1].Ts {
				t.Fatalf("%s: out of order at %d: %v then %v", when, i, got[i-1], got[i])
			}
		}
		if err := db.pdb.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMigrateHistory: a store holding history one key per point (table h, before
// chunked history) is moved to windows at Open, across several migration
// batches, and reads the same after.
func TestMigrateHistory(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	devs := []uuid.UUID{uuid.New(), uuid.New()}
	want := map[string][]kv.Entry{}
	b := db.pdb.NewBatch()
	n := 0
	for _, dev := range devs {
		for _, k := range []string{"k", "k\x00x", "temperature"} {
			// Enough points to need several 4 MiB batches, over several windows.
			for i := range 40000 {
				ts := int64(i)*450 - windowMs
				v := kv.DoubleValue(float64(i) / 3)
				if i%7 == 0 {
					v = kv.StringValue(fmt.Sprint("v", i))
				}
				key := appendTs(appendString(append([]byte{tableHistory}, dev[:]...), k), ts)
				if err := b.Set(key, appendValue(nil, v), nil); err != nil {
					t.Fatal(err)
				}
				want[dev.String()+k] = append(want[dev.String()+k], kv.Entry{Ts: ts, Key: k, Value: v})
				n++
			}
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = open(t, dir)
	ctx := t.Context()
	for _, dev := range devs {
		for _, k := range []string{"k", "k\x00x", "temperature"} {
			got, err := db.Read(ctx, storage.ReadQuery{EntityID: dev, Key: k, StartTs: math.MinInt64, EndTs: math.MaxInt64, Limit: n, Asc: true})
			if w := want[dev.String()+k]; err != nil || fmt.Sprint(got) != fmt.Sprint(w) {
				t.Fatalf("%s %q: %d points, %v; want %d", dev, k, len(got), err, len(w))
			}
		}
	}
	// Nothing is left in the old table.
	table := []byte{tableHistory}
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: table, UpperBound: prefixEnd(table)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if it.First() {
		t.Fatalf("history point %x left after the migration", it.Key())
	}
}
