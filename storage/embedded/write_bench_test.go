package embedded

import (
	"context"
	"fmt"
	"math"
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
// busy the machine is, and the bytes per point in sstables after a last flush.
// Run with -benchtime 1500x (15M points) so that compactions reach the deeper
// levels. values=thirds writes ts/3 (a third of them whole numbers, the rest
// repeating binary fractions that compress well), values=noise full-precision
// doubles of a smooth signal; neither has a short code in a chunk but the whole
// thirds. values=device writes the bench's rows (loadtest.AppendTelemetry: a
// decimal double, a long, a flag and a status string).
func BenchmarkWriteGroupCommit(b *testing.B) {
	values := []struct {
		name string
		row  func(ts int64) [4]kv.Entry
	}{
		{"thirds", func(ts int64) [4]kv.Entry {
			v := kv.DoubleValue(float64(ts) / 3)
			return [4]kv.Entry{{Ts: ts, Key: "temperature", Value: v}, {Ts: ts, Key: "humidity", Value: v}, {Ts: ts, Key: "pressure", Value: v}, {Ts: ts, Key: "status", Value: v}}
		}},
		{"noise", func(ts int64) [4]kv.Entry {
			// A deterministic full-precision signal: every double has all 53 bits.
			x := math.Sin(float64(ts) / 1000)
			return [4]kv.Entry{
				{Ts: ts, Key: "temperature", Value: kv.DoubleValue(20 + x)},
				{Ts: ts, Key: "humidity", Value: kv.DoubleValue(50 * x)},
				{Ts: ts, Key: "pressure", Value: kv.DoubleValue(1000 + x*x)},
				{Ts: ts, Key: "vibration", Value: kv.DoubleValue(math.Cos(float64(ts)))},
			}
		}},
		{"device", func(ts int64) [4]kv.Entry {
			return [4]kv.Entry{
				{Ts: ts, Key: "temperature", Value: kv.DoubleValue(float64(200+ts%10*10+ts%7) / 10)},
				{Ts: ts, Key: "humidity", Value: kv.LongValue(40 + ts%50)},
				{Ts: ts, Key: "active", Value: kv.BoolValue(true)},
				{Ts: ts, Key: "status", Value: kv.StringValue("ok")},
			}
		}},
	}
	for _, devices := range []int{1, 64} {
		for _, vals := range values {
			b.Run(fmt.Sprintf("devices=%d/values=%s", devices, vals.name), func(b *testing.B) {
				db, err := Open(b.TempDir(), Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				ids := make([]uuid.UUID, devices)
				for i := range ids {
					ids[i] = uuid.New()
				}
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
						for _, e := range vals.row(ts) {
							rows = append(rows, storage.Row{EntityID: id, Entry: e})
						}
					}
					if err := db.Write(ctx, rows); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*perWrite)/b.Elapsed().Seconds(), "rows/s")
				if err := db.pdb.Flush(); err != nil {
					b.Fatal(err)
				}
				m := db.pdb.Metrics()
				total := m.Total()
				b.ReportMetric(total.WriteAmp(), "write-amp")
				b.ReportMetric(float64(m.Compact.Count), "compactions")
				b.ReportMetric(float64(total.TablesSize)/float64(b.N*perWrite), "sst-bytes/point")
			})
		}
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
