package embedded

import (
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/storagetest"
)

func TestCounters(t *testing.T) {
	storagetest.RunCounters(t, func(t *testing.T) storage.Counters { return open(t, t.TempDir()) })
}

// TestCountersSurviveReopen: counters are on disk, not in the process.
func TestCountersSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	id := uuid.New()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AddCounters(t.Context(), []storage.CounterDelta{{EntityID: id, Name: "accepted", Delta: 7}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := open(t, dir).Counters(t.Context(), id)
	if err != nil || got["accepted"] != 7 || len(got) != 1 {
		t.Fatalf("after reopen: %v, %v", got, err)
	}
}
