package ingest

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"runtime/trace"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// gateStore is a storage.Telemetry whose Write blocks until the test opens the gate.
type gateStore struct {
	storage.Telemetry
	mu      sync.Mutex
	calls   [][]storage.Row
	entered chan struct{}
	gate    chan struct{}
	err     error
}

func newGateStore() *gateStore {
	return &gateStore{entered: make(chan struct{}, 100), gate: make(chan struct{})}
}

func (s *gateStore) Write(_ context.Context, rows []storage.Row) error {
	s.entered <- struct{}{}
	<-s.gate
	s.mu.Lock()
	s.calls = append(s.calls, append([]storage.Row(nil), rows...))
	s.mu.Unlock()
	return s.err
}

func rows(id uuid.UUID, n int) []storage.Row {
	r := make([]storage.Row, n)
	for i := range r {
		r[i] = storage.Row{EntityID: id, Entry: kv.Entry{Ts: int64(i), Key: "k", Value: kv.LongValue(int64(i))}}
	}
	return r
}

func TestGroupCommitAndQueueFull(t *testing.T) {
	st := newGateStore()
	w := NewWriter(st, Config{Shards: 1, QueueSize: 3})
	id := uuid.New()
	errs := make(chan error, 10)
	write := func(n int) { go func() { errs <- w.Write(context.Background(), rows(id, n)) }() }

	write(1)
	<-st.entered // the first commit is in progress and holds the shard
	for range 3 {
		write(2) // these wait in the queue
	}
	for len(w.shards[0].queue) < 3 {
		runtime.Gosched() // each writer enqueues at once; wait until all three have
	}
	if err := w.Write(context.Background(), rows(id, 1)); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("full queue: got %v, want ErrOverloaded", err)
	}
	close(st.gate)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	// One commit for the first request, one group commit for the three queued ones.
	if len(st.calls) != 2 || len(st.calls[1]) != 6 {
		t.Fatalf("commits: %d, rows in second %d; want 2 commits, 6 rows", len(st.calls), len(st.calls[1]))
	}
}

func TestStoreErrorReachesEveryWaiter(t *testing.T) {
	st := newGateStore()
	close(st.gate)
	st.err = storage.ErrUnavailable
	w := NewWriter(st, Config{Shards: 2})
	defer w.Close()
	if err := w.Write(context.Background(), rows(uuid.New(), 5)); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("got %v", err)
	}
}

func TestCloseCommitsQueuedAndRefusesNew(t *testing.T) {
	st := newGateStore()
	w := NewWriter(st, Config{Shards: 1})
	id := uuid.New()
	done := make(chan error, 2)
	go func() { done <- w.Write(context.Background(), rows(id, 1)) }()
	<-st.entered
	go func() { done <- w.Write(context.Background(), rows(id, 1)) }()
	for len(w.shards[0].queue) < 1 {
		runtime.Gosched()
	}
	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	close(st.gate)
	<-closed
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Write(context.Background(), rows(id, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if len(st.calls) != 2 {
		t.Fatalf("commits: %d", len(st.calls))
	}
}

func BenchmarkWriterGroupCommit(b *testing.B) {
	st := &nopStore{}
	w := NewWriter(st, Config{})
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

type nopStore struct{ storage.Telemetry }

func (nopStore) Write(context.Context, []storage.Row) error { return nil }

// TestStoreWriteRegion: an execution trace marks each group commit's store write,
// which is how bench/RESULTS.md splits a slow commit into its causes.
func TestStoreWriteRegion(t *testing.T) {
	if trace.IsEnabled() {
		t.Skip("a trace is already running")
	}
	st := newGateStore()
	close(st.gate)
	w := NewWriter(st, Config{Shards: 1})
	defer w.Close()
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	err := w.Write(context.Background(), rows(uuid.New(), 3))
	trace.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(storeWriteRegion)) {
		t.Fatalf("the trace has no %q region", storeWriteRegion)
	}
}
