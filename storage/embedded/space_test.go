package embedded

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// TestLowSpaceRefusesWrites: below the free-space reserve telemetry,
// attribute, counter and entity writes are ErrUnavailable, reads and deletes
// go on, and writes resume once space is freed.
func TestLowSpaceRefusesWrites(t *testing.T) {
	d := open(t, t.TempDir())
	var free atomic.Int64
	free.Store(1 << 30)
	d.space.free = func(string) (int64, error) { return free.Load(), nil }
	d.space.minFree = 256 << 20
	ctx := t.Context()
	id := uuid.New()
	row := []storage.Row{{EntityID: id, Entry: kv.Entry{Ts: 1, Key: "k", Value: kv.LongValue(1)}}}
	if err := d.Write(ctx, row); err != nil {
		t.Fatal(err)
	}

	free.Store(100 << 20)
	d.space.checked.Store(0) // look again now
	for name, err := range map[string]error{
		"telemetry":  d.Write(ctx, row),
		"attributes": d.SaveAttributes(ctx, id, storage.ServerScope, []kv.Entry{{Key: "a", Value: kv.LongValue(1)}}),
		"counters":   d.AddCounters(ctx, []storage.CounterDelta{{EntityID: id, Name: "n", Delta: 1}}),
		"entity":     d.Put(ctx, storage.Record{Kind: "k", ID: uuid.New(), Data: []byte("{}")}),
	} {
		var low errLowSpace
		if !errors.Is(err, storage.ErrUnavailable) || !errors.As(err, &low) {
			t.Fatalf("%s write with 100 MiB free: %v", name, err)
		}
	}
	if got, err := d.Latest(ctx, id, []string{"k"}); err != nil || len(got) != 1 {
		t.Fatalf("read while low: %v %v", got, err)
	}
	if err := d.DeleteEntitySeries(ctx, id); err != nil {
		t.Fatalf("delete while low: %v", err)
	}

	free.Store(1 << 30)
	d.space.checked.Store(0)
	if err := d.Write(ctx, row); err != nil {
		t.Fatalf("write after space was freed: %v", err)
	}
}
