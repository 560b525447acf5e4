package embedded

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// BenchmarkReadNewest reads the newest 100 points of a 1 kHz series: a whole
// window of 600,000 points is scanned to find them.
func BenchmarkReadNewest(b *testing.B) {
	db, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	dev := uuid.New()
	start := windowOf(1_700_000_000_000)
	rows := make([]storage.Row, 0, 10000)
	for ts := start; ts < start+windowMs; ts++ {
		rows = append(rows, storage.Row{EntityID: dev, Entry: kv.Entry{Ts: ts, Key: "vibration", Value: kv.DoubleValue(float64(ts % 1000))}})
		if len(rows) == cap(rows) {
			if err := db.Write(ctx, rows); err != nil {
				b.Fatal(err)
			}
			rows = rows[:0]
		}
	}
	if err := db.pdb.Flush(); err != nil {
		b.Fatal(err)
	}
	q := storage.ReadQuery{EntityID: dev, Key: "vibration", StartTs: start, EndTs: start + windowMs, Limit: 100}
	b.ReportAllocs()
	for b.Loop() {
		out, err := db.Read(ctx, q)
		if err != nil || len(out) != 100 {
			b.Fatal(len(out), err)
		}
	}
}
