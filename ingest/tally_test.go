package ingest

import (
	"context"
	"errors"
	"maps"
	"runtime"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/storage"
)

// countTally is a Tally that sums per device and counter name.
type countTally struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *countTally) add(rows []storage.Row, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	for _, r := range rows {
		c.m[r.EntityID.String()[:4]+" "+name]++
	}
}

func (c *countTally) Accepted(rows []storage.Row)                { c.add(rows, "accepted") }
func (c *countTally) Stored(rows []storage.Row)                  { c.add(rows, "stored") }
func (c *countTally) Rejected(rows []storage.Row, reason string) { c.add(rows, reason) }

func (c *countTally) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}

func wantCounts(t *testing.T, tally *countTally, want map[string]int) {
	t.Helper()
	if got := tally.counts(); !maps.Equal(got, want) {
		t.Fatalf("tally %v, want %v", got, want)
	}
}

// TestWriterTally: acknowledged rows count as accepted, refused ones by reason.
func TestWriterTally(t *testing.T) {
	st := newGateStore()
	tally := &countTally{}
	w := NewWriter(st, Config{Shards: 1, QueueSize: 1, Tally: tally})
	a := uuid.MustParse("aaaaaaaa-0000-4000-8000-000000000000")
	b := uuid.MustParse("bbbbbbbb-0000-4000-8000-000000000000")
	errs := make(chan error, 2)
	go func() { errs <- w.Write(context.Background(), rows(a, 2)) }()
	<-st.entered // holds the shard
	go func() { errs <- w.Write(context.Background(), rows(b, 3)) }()
	for len(w.shards[0].queue) < 1 {
		runtime.Gosched()
	}
	if err := w.Write(context.Background(), rows(b, 4)); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("full queue: %v", err)
	}
	close(st.gate)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	st.err = ErrSpoolFull
	if err := w.Write(context.Background(), rows(a, 1)); !errors.Is(err, ErrSpoolFull) {
		t.Fatal(err)
	}
	st.err = storage.ErrUnavailable
	if err := w.Write(context.Background(), rows(a, 1)); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatal(err)
	}
	w.Close()
	if err := w.Write(context.Background(), rows(b, 5)); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	wantCounts(t, tally, map[string]int{"aaaa accepted": 2, "bbbb accepted": 3, "bbbb queue_full": 4,
		"aaaa spool_full": 1, "aaaa unavailable": 1, "bbbb unavailable": 5})
}

// TestSpoolTally: delivered rows count as stored, only once delivered.
func TestSpoolTally(t *testing.T) {
	sink := newMemSink()
	sink.setDown(true)
	tally := &countTally{}
	sp, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), Tally: tally}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close(context.Background())
	a := uuid.MustParse("aaaaaaaa-0000-4000-8000-000000000000")
	if err := sp.Write(context.Background(), testRows(a, 0, 3)); err != nil {
		t.Fatal(err)
	}
	if err := sp.Flush(context.Background()); err == nil {
		t.Fatal("flush to a down sink succeeded")
	}
	wantCounts(t, tally, map[string]int{})
	sink.setDown(false)
	if err := sp.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, tally, map[string]int{"aaaa stored": 3})
}

// BenchmarkWriterGroupCommitTally is BenchmarkWriterGroupCommit with the node's
// tally: counting happens once per device of a commit, after the answers, and
// allocates nothing once the device is known, so allocs/op stay the writer's.
func BenchmarkWriterGroupCommitTally(b *testing.B) {
	w := NewWriter(&nopStore{}, Config{Tally: engine.NewIngestStats(true)})
	defer w.Close()
	r := rows(uuid.New(), 10)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := w.Write(context.Background(), r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
