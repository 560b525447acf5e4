package storagetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

func testConcurrency(t *testing.T, open func(t *testing.T) storage.Backend) {
	t.Run("DistinctEntities", func(t *testing.T) {
		b := open(t)
		const writers, batches, keys = 16, 20, 5
		ids := make([]uuid.UUID, writers)
		var wg sync.WaitGroup
		for w := range ids {
			ids[w] = uuid.New()
			wg.Go(func() {
				for batch := range int64(batches) {
					var es []kv.Entry
					for k := range keys {
						es = append(es, long(batch, fmt.Sprintf("k%d", k), batch))
					}
					if err := b.Write(t.Context(), rows(ids[w], es...)); err != nil {
						t.Errorf("writer %d: %v", w, err)
						return
					}
				}
			})
		}
		wg.Wait()
		for _, id := range ids {
			latest, err := b.Latest(t.Context(), id, nil)
			must(t, err)
			if len(latest) != keys {
				t.Fatalf("entity %s: %d latest values, want %d", id, len(latest), keys)
			}
			for _, e := range latest {
				if e.Ts != batches-1 {
					t.Fatalf("entity %s: latest %s at %d, want %d", id, e.Key, e.Ts, batches-1)
				}
				hist, err := b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: e.Key, StartTs: 0, EndTs: batches, Limit: 1000})
				must(t, err)
				if len(hist) != batches {
					t.Fatalf("entity %s key %s: %d points, want %d", id, e.Key, len(hist), batches)
				}
			}
		}
	})

	t.Run("SameEntity", func(t *testing.T) {
		// Writers interleave timestamps of one series; the newest ts must win
		// whatever order the writes land in.
		b := open(t)
		id := uuid.New()
		const writers, writes = 8, 25
		var wg sync.WaitGroup
		for w := range int64(writers) {
			wg.Go(func() {
				for i := range int64(writes) {
					ts := i*writers + w
					if err := b.Write(t.Context(), rows(id, long(ts, "k", ts))); err != nil {
						t.Errorf("writer %d: %v", w, err)
						return
					}
				}
			})
		}
		wg.Wait()
		const newest = writers*writes - 1
		got, err := b.Latest(t.Context(), id, []string{"k"})
		must(t, err)
		checkEntries(t, "Latest", got, []kv.Entry{long(newest, "k", newest)})
		hist, err := b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "k", StartTs: 0, EndTs: newest + 1, Limit: 1000})
		must(t, err)
		if len(hist) != writers*writes {
			t.Fatalf("got %d points, want %d", len(hist), writers*writes)
		}
	})

	t.Run("UniqueRace", func(t *testing.T) {
		b := open(t)
		const racers = 8
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range racers {
			wg.Go(func() {
				err := b.Put(t.Context(), storage.Record{Kind: "device", ID: uuid.New(), Unique: []string{"name:contested"}})
				switch {
				case err == nil:
					wins.Add(1)
				case !errors.Is(err, storage.ErrConflict):
					t.Errorf("Put: %v", err)
				}
			})
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("%d Puts won the same unique value, want 1", n)
		}
		if _, err := b.Lookup(t.Context(), "device", "name:contested"); err != nil {
			t.Fatal(err)
		}
	})
}
