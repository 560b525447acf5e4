package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// memLatest is a LatestStore in memory that counts the rows it was given and can
// fail.
type memLatest struct {
	mu      sync.Mutex
	rows    int
	err     error
	repeats []uuid.UUID // what UpdateLatest answers

	reapplies  int   // ReapplyLatest calls
	reapplyErr error // what ReapplyLatest answers
}

func (m *memLatest) UpdateLatest(_ context.Context, rows []storage.Row, vers []uint64) ([]uuid.UUID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	m.rows += len(rows)
	return m.repeats, nil
}

func (m *memLatest) count() int { m.mu.Lock(); defer m.mu.Unlock(); return m.rows }

func (m *memLatest) LatestValues(context.Context, uuid.UUID, []string) ([]kv.Entry, error) {
	return nil, nil
}
func (m *memLatest) LatestKeys(context.Context, uuid.UUID) ([]string, error) { return nil, nil }
func (m *memLatest) DeleteLatest(context.Context, uuid.UUID, []string) error { return nil }
func (m *memLatest) DeleteLatestIn(context.Context, uuid.UUID, []string, int64, int64, uint64) ([]string, error) {
	return nil, nil
}
func (m *memLatest) NoteRewrite(context.Context, uuid.UUID, []string) error { return nil }
func (m *memLatest) ReapplyLatest(context.Context, []storage.Row, []uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reapplies++
	return m.reapplyErr
}

// TestSpooledWrite: the spool and the latest store are written together and
// either's failure fails the write; a full spool refuses before the latest store
// sees the rows (an overloaded node must not show values it answers 503 for).
func TestSpooledWrite(t *testing.T) {
	sink := newMemSink()
	sink.setDown(true)
	spool, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), MaxBytes: 4096, FlushInterval: time.Hour}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer spool.Close(context.Background())
	latest := &memLatest{}
	w := &Spooled{Spool: spool, LatestStore: latest}
	id := uuid.New()

	if err := w.Write(t.Context(), testRows(id, 0, 10)); err != nil {
		t.Fatal(err)
	}
	if latest.count() != 10 {
		t.Fatalf("latest store got %d rows, want 10", latest.count())
	}

	latest.err = errors.New("redis down")
	if err := w.Write(t.Context(), testRows(id, 10, 10)); err == nil || !errors.Is(err, latest.err) {
		t.Fatalf("write with the latest store down: %v", err)
	}
	latest.err = nil

	// Until a write would pass MaxBytes (Spool.room), then while Full.
	written := 20
	for refused := 0; refused < 2; {
		before := latest.count()
		err := w.Write(t.Context(), testRows(id, written, 10))
		if errors.Is(err, ErrSpoolFull) {
			if latest.count() != before {
				t.Fatal("the latest store got rows the full spool refused")
			}
			refused++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		written += 10
	}
}

// TestSpooledWriteRefusedKeepsLatest: a write the spool refuses after
// Spooled began it changes no latest value: one that would pass MaxBytes
// though the spool is not Full, and one to a closed spool. (A full disk:
// TestSpoolDiskFull.)
func TestSpooledWriteRefusedKeepsLatest(t *testing.T) {
	sink := newMemSink()
	sink.setDown(true)
	spool, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), MaxBytes: 4096, FlushInterval: time.Hour}, sink)
	if err != nil {
		t.Fatal(err)
	}
	latest := &memLatest{}
	w := &Spooled{Spool: spool, LatestStore: latest}
	id := uuid.New()
	if err := w.Write(t.Context(), testRows(id, 0, 10)); err != nil {
		t.Fatal(err)
	}
	if spool.Full() {
		t.Fatal("full after 10 rows")
	}
	if err := w.Write(t.Context(), testRows(id, 10, 1000)); !errors.Is(err, ErrSpoolFull) {
		t.Fatalf("a write past MaxBytes: %v, want ErrSpoolFull", err)
	}
	if n := latest.count(); n != 10 {
		t.Fatalf("the latest store got %d rows, want the 10 the spool took", n)
	}
	spool.Close(context.Background())
	if err := w.Write(t.Context(), testRows(id, 20, 10)); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("a write to a closed spool: %v, want storage unavailable", err)
	}
	if n := latest.count(); n != 10 {
		t.Fatalf("the latest store got %d rows, want the 10 the spool took", n)
	}
}

// TestSpooledWriteRepeats: the spool delivers the rows of the entities the latest
// store names as repeats flagged, the others not; when the latest store fails,
// the spooled rows all go flagged.
func TestSpooledWriteRepeats(t *testing.T) {
	sink := newMemSink()
	spool, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), FlushInterval: time.Hour}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer spool.Close(context.Background())
	a, b := uuid.New(), uuid.New()
	latest := &memLatest{repeats: []uuid.UUID{b}}
	w := &Spooled{Spool: spool, LatestStore: latest}
	flags := func() map[uuid.UUID]string { t.Helper(); return sink.flush(t, spool) }
	if err := w.Write(t.Context(), append(testRows(a, 0, 2), testRows(b, 0, 2)...)); err != nil {
		t.Fatal(err)
	}
	if got := flags(); got[a] != "ff" || got[b] != "tt" {
		t.Fatalf("a new, b repeating: a %q b %q", got[a], got[b])
	}
	latest.mu.Lock()
	latest.err = errors.New("redis down")
	latest.mu.Unlock()
	if err := w.Write(t.Context(), testRows(a, 2, 2)); err == nil {
		t.Fatal("Write succeeded with the latest store down")
	}
	if got := flags(); got[a] != "tt" {
		t.Fatalf("spooled while the latest store failed: a %q, want every row flagged", got[a])
	}
}

// TestReapplyDoesNotFailDelivery: a latest store that cannot take the reapply
// is retried, then logged; the delivery, in history already, still succeeds
// (failing it would insert the rows again with every retry).
func TestReapplyDoesNotFailDelivery(t *testing.T) {
	defer func(b []time.Duration) { reapplyBackoff = b }(reapplyBackoff)
	reapplyBackoff = []time.Duration{time.Millisecond, time.Millisecond}
	sink := newMemSink()
	latest := &memLatest{reapplyErr: errors.New("redis away")}
	r := ReapplyLatest(sink, latest, nil)
	rows := []storage.Row{{EntityID: uuid.New(), Entry: kv.Entry{Ts: 1, Key: "k", Value: kv.LongValue(1)}}}
	if err := r.WriteHistory(context.Background(), rows, []bool{false}, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	if len(sink.rows) != 1 || latest.reapplies != 3 {
		t.Fatalf("history %d rows, %d reapplies; want 1 and 3", len(sink.rows), latest.reapplies)
	}
	// Redis unreachable: one try, no delivery waits for retries.
	latest.reapplyErr = fmt.Errorf("%w: connection refused", storage.ErrUnavailable)
	if err := r.WriteHistory(context.Background(), rows, []bool{false}, []uint64{1}); err != nil || latest.reapplies != 4 {
		t.Fatalf("Redis away: %v, %d reapplies; want 4 in all", err, latest.reapplies)
	}
	sink.setDown(true)
	if err := r.WriteHistory(context.Background(), rows, []bool{false}, []uint64{1}); err == nil || latest.reapplies != 4 {
		t.Fatalf("history down: %v, %d reapplies", err, latest.reapplies)
	}
}
