package embedded

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// BenchmarkWriteGroupCommit is the storage half of the sluice-bench batch100 cell:
// the ingest shard hands Write up to 10,000 rows at a time (25 requests of 100
// timestamps × 4 keys), every point new. Besides rows/s it reports Pebble's write
// amplification (bytes written by flushes and compactions per byte logged), which
// is what compaction CPU follows and which, unlike rows/s, does not depend on how
// busy the machine is. Run with -benchtime 1500x (15M points) so that compactions
// reach the deeper levels.
func BenchmarkWriteGroupCommit(b *testing.B) {
	for _, devices := range []int{1, 64} {
		b.Run(fmt.Sprintf("devices=%d", devices), func(b *testing.B) {
			db, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			ids := make([]uuid.UUID, devices)
			for i := range ids {
				ids[i] = uuid.New()
			}
			keys := []string{"temperature", "humidity", "pressure", "status"}
			const perWrite = 10000
			rows := make([]storage.Row, 0, perWrite)
			ctx := context.Background()
			var ts int64 = 1_700_000_000_000
			n := 0
			for b.Loop() {
				rows = rows[:0]
				for len(rows) < perWrite {
					ts++
					id := ids[n%len(ids)]
					n++
					for _, k := range keys {
						rows = append(rows, storage.Row{EntityID: id, Entry: kv.Entry{Ts: ts, Key: k, Value: kv.DoubleValue(float64(ts) / 3)}})
					}
				}
				if err := db.Write(ctx, rows); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*perWrite)/b.Elapsed().Seconds(), "rows/s")
			m := db.pdb.Metrics()
			total := m.Total()
			b.ReportMetric(total.WriteAmp(), "write-amp")
			b.ReportMetric(float64(m.Compact.Count), "compactions")
		})
	}
}

// TestWriteUnorderedBatch checks that Write's reordering of a batch by key keeps
// the batch's meaning: within one call, of two rows with the same (entity, key, ts)
// the later wins, in history and in the latest value, whatever order the rows and
// series come in.
func TestWriteUnorderedBatch(t *testing.T) {
	db := open(t, t.TempDir())
	ctx := t.Context()
	a, b := uuid.New(), uuid.New()
	row := func(id uuid.UUID, key string, ts int64, v int64) storage.Row {
		return storage.Row{EntityID: id, Entry: kv.Entry{Ts: ts, Key: key, Value: kv.LongValue(v)}}
	}
	rows := []storage.Row{
		row(b, "z", 5, 1),
		row(a, "k", 30, 1),
		row(a, "k", 10, 2),
		row(a, "k\x00x", 7, 9),
		row(b, "z", 5, 2),  // same point as the first row: replaces it
		row(a, "k", 30, 3), // same point as the second row: replaces it
		row(a, "k", 20, 4),
		row(a, "k", -5, 5),
		row(a, "k", 10, 6), // replaces the third row
	}
	if err := db.Write(ctx, rows); err != nil {
		t.Fatal(err)
	}
	got, err := db.Read(ctx, storage.ReadQuery{EntityID: a, Key: "k", StartTs: -100, EndTs: 100, Limit: 100, Asc: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []kv.Entry{
		{Ts: -5, Key: "k", Value: kv.LongValue(5)},
		{Ts: 10, Key: "k", Value: kv.LongValue(6)},
		{Ts: 20, Key: "k", Value: kv.LongValue(4)},
		{Ts: 30, Key: "k", Value: kv.LongValue(3)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("history of a/k:\n got %v\nwant %v", got, want)
	}
	for _, c := range []struct {
		id   uuid.UUID
		key  string
		want kv.Entry
	}{
		{a, "k", kv.Entry{Ts: 30, Key: "k", Value: kv.LongValue(3)}},
		{a, "k\x00x", kv.Entry{Ts: 7, Key: "k\x00x", Value: kv.LongValue(9)}},
		{b, "z", kv.Entry{Ts: 5, Key: "z", Value: kv.LongValue(2)}},
	} {
		latest, err := db.Latest(ctx, c.id, []string{c.key})
		if err != nil || len(latest) != 1 || latest[0] != c.want {
			t.Errorf("Latest %q = %v, %v; want %v", c.key, latest, err, c.want)
		}
	}
	hist, err := db.Read(ctx, storage.ReadQuery{EntityID: b, Key: "z", StartTs: 0, EndTs: 100, Limit: 100})
	if err != nil || len(hist) != 1 || hist[0].Value != kv.LongValue(2) {
		t.Errorf("history of b/z = %v, %v; want one point of 2", hist, err)
	}
}
