package storagetest

import (
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

func testRead(t *testing.T, open func(t *testing.T) storage.Backend) {
	b := open(t)
	id := uuid.New()
	// "k" holds 10, 20, ..., 100; "many" holds 150 points at 1000..1149.
	var es []kv.Entry
	for ts := int64(10); ts <= 100; ts += 10 {
		es = append(es, long(ts, "k", ts))
	}
	for i := range int64(150) {
		es = append(es, long(1000+i, "many", i))
	}
	write(t, b, id, es...)

	// points returns the "k" points with the given timestamps, in that order.
	points := func(tss ...int64) []kv.Entry {
		var out []kv.Entry
		for _, ts := range tss {
			out = append(out, long(ts, "k", ts))
		}
		return out
	}
	f := func(name string, q storage.ReadQuery, want []kv.Entry) {
		t.Helper()
		q.EntityID = id
		if q.Key == "" {
			q.Key = "k"
		}
		got, err := b.Read(t.Context(), q)
		must(t, err)
		checkEntries(t, name, got, want)
	}
	f("start inclusive, end exclusive, newest first", storage.ReadQuery{StartTs: 20, EndTs: 50}, points(40, 30, 20))
	f("ascending", storage.ReadQuery{StartTs: 20, EndTs: 50, Asc: true}, points(20, 30, 40))
	f("between points", storage.ReadQuery{StartTs: 21, EndTs: 29}, nil)
	f("empty range", storage.ReadQuery{StartTs: 50, EndTs: 50}, nil)
	f("whole range", storage.ReadQuery{StartTs: 0, EndTs: 101, Asc: true}, points(10, 20, 30, 40, 50, 60, 70, 80, 90, 100))
	f("limit newest", storage.ReadQuery{StartTs: 0, EndTs: 101, Limit: 3}, points(100, 90, 80))
	f("limit oldest", storage.ReadQuery{StartTs: 0, EndTs: 101, Limit: 3, Asc: true}, points(10, 20, 30))
	f("interval without agg is raw", storage.ReadQuery{StartTs: 0, EndTs: 101, Interval: 50, Limit: 2}, points(100, 90))
	f("agg without interval is raw", storage.ReadQuery{StartTs: 0, EndTs: 101, Agg: storage.AggSum, Limit: 2}, points(100, 90))
	f("other key", storage.ReadQuery{Key: "missing", StartTs: 0, EndTs: 101}, nil)

	t.Run("DefaultLimit", func(t *testing.T) {
		got, err := b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "many", StartTs: 0, EndTs: 2000})
		must(t, err)
		if len(got) != 100 || got[0].Ts != 1149 || got[99].Ts != 1050 {
			t.Fatalf("got %d points, want the 100 newest, 1149 down to 1050: %s", len(got), formatEntries(got))
		}
		got, err = b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "many", StartTs: 0, EndTs: 2000, Limit: 1000})
		must(t, err)
		if len(got) != 150 {
			t.Fatalf("with Limit 1000 got %d points, want 150", len(got))
		}
	})
}
