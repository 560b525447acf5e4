package storagetest

import (
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// RunCounters is the conformance suite of storage.Counters. open must return a
// fresh, empty back end and close it itself (t.Cleanup).
func RunCounters(t *testing.T, open func(t *testing.T) storage.Counters) {
	t.Run("AddAndRead", func(t *testing.T) {
		c := open(t)
		a, b := uuid.New(), uuid.New()
		f := func(id uuid.UUID, want map[string]int64) {
			t.Helper()
			got, err := c.Counters(t.Context(), id)
			must(t, err)
			if !maps.Equal(got, want) {
				t.Fatalf("counters of %s: %v, want %v", id, got, want)
			}
		}
		f(a, map[string]int64{})
		must(t, c.AddCounters(t.Context(), nil))
		must(t, c.AddCounters(t.Context(), []storage.CounterDelta{
			{EntityID: a, Name: "accepted", Delta: 5},
			{EntityID: a, Name: "rejected:queue_full", Delta: 2},
			{EntityID: b, Name: "accepted", Delta: 1},
			{EntityID: a, Name: "accepted", Delta: 3}, // the same counter twice in one call
		}))
		f(a, map[string]int64{"accepted": 8, "rejected:queue_full": 2})
		f(b, map[string]int64{"accepted": 1})
		must(t, c.AddCounters(t.Context(), []storage.CounterDelta{{EntityID: b, Name: "accepted", Delta: -1}, {EntityID: b, Name: "stored", Delta: 1 << 40}}))
		f(b, map[string]int64{"accepted": 0, "stored": 1 << 40})
	})
	t.Run("Delete", func(t *testing.T) {
		c := open(t)
		a, b := uuid.New(), uuid.New()
		must(t, c.AddCounters(t.Context(), []storage.CounterDelta{
			{EntityID: a, Name: "accepted", Delta: 5}, {EntityID: a, Name: "stored", Delta: 5},
			{EntityID: b, Name: "accepted", Delta: 1},
		}))
		must(t, c.DeleteCounters(t.Context(), a))
		must(t, c.DeleteCounters(t.Context(), uuid.New())) // none: no error
		if got, err := c.Counters(t.Context(), a); err != nil || len(got) != 0 {
			t.Fatalf("deleted entity's counters: %v, %v", got, err)
		}
		if got, err := c.Counters(t.Context(), b); err != nil || got["accepted"] != 1 {
			t.Fatalf("other entity's counters: %v, %v", got, err)
		}
	})
	t.Run("ConcurrentAdds", func(t *testing.T) {
		c := open(t)
		id := uuid.New()
		const writers, adds = 8, 25
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range adds {
					err := c.AddCounters(t.Context(), []storage.CounterDelta{
						{EntityID: id, Name: "n", Delta: 1},
						{EntityID: id, Name: fmt.Sprint("w", w), Delta: int64(i)},
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		got, err := c.Counters(t.Context(), id)
		must(t, err)
		if got["n"] != writers*adds || got["w0"] != adds*(adds-1)/2 {
			t.Fatalf("after concurrent adds: %v", got)
		}
	})
}
