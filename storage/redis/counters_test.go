package redis

import (
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/embedded"
	"github.com/sluice-iot/sluice/storage/split"
	"github.com/sluice-iot/sluice/storage/storagetest"
)

func TestCounters(t *testing.T) {
	addr(t)
	storagetest.RunCounters(t, func(t *testing.T) storage.Counters { return openTest(t) })
}

func TestClusterCounters(t *testing.T) {
	clusterAddrs(t)
	storagetest.RunCounters(t, func(t *testing.T) storage.Counters { return openClusterTest(t) })
}

// TestSplitCounters: the production back end keeps counters in Redis, not in
// its telemetry back end.
func TestSplitCounters(t *testing.T) {
	addr(t)
	storagetest.RunCounters(t, func(t *testing.T) storage.Counters {
		tel, err := embedded.Open(t.TempDir(), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tel.Close() })
		return split.New(tel, openTest(t))
	})
	tel, err := embedded.Open(t.TempDir(), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	state := openTest(t)
	b := split.New(tel, state)
	id := uuid.New()
	if err := b.AddCounters(t.Context(), []storage.CounterDelta{{EntityID: id, Name: "stored", Delta: 2}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := state.Counters(t.Context(), id); got["stored"] != 2 {
		t.Fatalf("redis counters: %v", got)
	}
	if got, _ := tel.Counters(t.Context(), id); len(got) != 0 {
		t.Fatalf("telemetry back end has counters: %v", got)
	}
}

// TestAddCountersClosed: a closed store reports every delta as not added.
func TestAddCountersClosed(t *testing.T) {
	s := openTest(t)
	s.Close()
	err := s.AddCounters(t.Context(), []storage.CounterDelta{{EntityID: uuid.New(), Name: "x", Delta: 1}})
	if err == nil {
		t.Fatal("AddCounters on a closed store succeeded")
	}
}
