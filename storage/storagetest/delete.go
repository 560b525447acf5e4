package storagetest

import (
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

func testDeleteSeries(t *testing.T, open func(t *testing.T) storage.Backend) {
	// setup writes a, b and c at 10, 20, 30 and 40 (value = ts).
	setup := func(t *testing.T) (storage.Backend, uuid.UUID) {
		b := open(t)
		id := uuid.New()
		var es []kv.Entry
		for _, k := range []string{"a", "b", "c"} {
			for ts := int64(10); ts <= 40; ts += 10 {
				es = append(es, long(ts, k, ts))
			}
		}
		write(t, b, id, es...)
		return b, id
	}
	history := func(t *testing.T, b storage.Backend, id uuid.UUID, key string, want ...int64) {
		t.Helper()
		got, err := b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: key, StartTs: 0, EndTs: 1000, Asc: true})
		must(t, err)
		var es []kv.Entry
		for _, ts := range want {
			es = append(es, long(ts, key, ts))
		}
		checkEntries(t, "history of "+key, got, es)
	}
	latest := func(t *testing.T, b storage.Backend, id uuid.UUID, want ...kv.Entry) {
		t.Helper()
		got, err := b.Latest(t.Context(), id, nil)
		must(t, err)
		checkEntries(t, "latest", got, want)
		var keys []string
		for _, e := range want {
			keys = append(keys, e.Key)
		}
		got2, err := b.SeriesKeys(t.Context(), id)
		must(t, err)
		checkStrings(t, "SeriesKeys", got2, keys)
	}

	t.Run("RangeKeepsLatest", func(t *testing.T) {
		b, id := setup(t)
		must(t, b.DeleteSeries(t.Context(), storage.DeleteQuery{EntityID: id, Keys: []string{"a", "b"}, StartTs: 20, EndTs: 40}))
		history(t, b, id, "a", 10, 40)
		history(t, b, id, "b", 10, 40)
		history(t, b, id, "c", 10, 20, 30, 40)
		latest(t, b, id, long(40, "a", 40), long(40, "b", 40), long(40, "c", 40))
	})

	t.Run("DeleteLatest", func(t *testing.T) {
		b, id := setup(t)
		must(t, b.DeleteSeries(t.Context(), storage.DeleteQuery{EntityID: id, Keys: []string{"a"}, StartTs: 30, EndTs: 100, DeleteLatest: true}))
		history(t, b, id, "a", 10, 20)
		latest(t, b, id, long(40, "b", 40), long(40, "c", 40))
	})

	t.Run("RewriteLatest", func(t *testing.T) {
		b, id := setup(t)
		must(t, b.DeleteSeries(t.Context(), storage.DeleteQuery{EntityID: id, Keys: []string{"a", "b"}, StartTs: 30, EndTs: 100, DeleteLatest: true, RewriteLatest: true}))
		history(t, b, id, "a", 10, 20)
		latest(t, b, id, long(20, "a", 20), long(20, "b", 20), long(40, "c", 40))
	})

	t.Run("RewriteWithNothingLeft", func(t *testing.T) {
		b, id := setup(t)
		must(t, b.DeleteSeries(t.Context(), storage.DeleteQuery{EntityID: id, Keys: []string{"c"}, StartTs: 0, EndTs: 100, DeleteLatest: true, RewriteLatest: true}))
		history(t, b, id, "c")
		latest(t, b, id, long(40, "a", 40), long(40, "b", 40))
	})

	t.Run("EntitySeries", func(t *testing.T) {
		b, id := setup(t)
		other := uuid.New()
		write(t, b, other, long(10, "a", 10))
		must(t, b.SaveAttributes(t.Context(), id, storage.ServerScope, []kv.Entry{long(5, "attr", 1)}))
		must(t, b.DeleteEntitySeries(t.Context(), id))
		history(t, b, id, "a")
		latest(t, b, id)
		history(t, b, other, "a", 10)
		latest(t, b, other, long(10, "a", 10))
		attrs, err := b.GetAttributes(t.Context(), id, storage.ServerScope, nil)
		must(t, err)
		checkEntries(t, "attributes survive", attrs, []kv.Entry{long(5, "attr", 1)})
		// The entity can be written again afterwards.
		write(t, b, id, long(50, "a", 50))
		latest(t, b, id, long(50, "a", 50))
	})
}
