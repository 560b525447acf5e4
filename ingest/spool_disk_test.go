//go:build linux

package ingest

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// swapFile makes the spool append to f instead of its segment, and returns
// how to undo it.
func swapFile(t *testing.T, s *Spool, name string) func() {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.wmu.Lock()
	real := s.active.f
	s.active.f = f
	s.wmu.Unlock()
	return func() {
		s.wmu.Lock()
		s.active.f = real
		s.wmu.Unlock()
		f.Close()
	}
}

// TestSpoolDiskFull: no space left for the append is a 503 (storage
// unavailable), not a 500, that leaves the latest values untouched, and
// writes go on once there is space again.
func TestSpoolDiskFull(t *testing.T) {
	s, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), FlushInterval: time.Hour}, newMemSink())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	latest := &memLatest{}
	w := &Spooled{Spool: s, LatestStore: latest}
	restore := swapFile(t, s, "/dev/full")
	if err := w.Write(context.Background(), testRows(uuid.New(), 0, 10)); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("append to a full disk: %v, want storage unavailable", err)
	}
	restore()
	if n := latest.count(); n != 0 {
		t.Fatalf("a write refused for a full disk changed %d latest values", n)
	}
	if err := w.Write(context.Background(), testRows(uuid.New(), 0, 10)); err != nil {
		t.Fatalf("after space returns: %v", err)
	}
}

// TestSpoolSyncFailure: after a failed fsync the spool refuses every write as
// unavailable before the latest values are touched, says so through Failed
// (/healthz), and a flush gives up instead of waiting for rows that will never
// be durable in this process.
func TestSpoolSyncFailure(t *testing.T) {
	s, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), FlushInterval: time.Hour}, newMemSink())
	if err != nil {
		t.Fatal(err)
	}
	latest := &memLatest{}
	w := &Spooled{Spool: s, LatestStore: latest}
	restore := swapFile(t, s, "/dev/null") // fdatasync fails there
	if err := w.Write(context.Background(), testRows(uuid.New(), 0, 10)); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("a failed sync: %v, want storage unavailable", err)
	}
	restore()
	if err := s.Failed(); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Failed after a failed sync: %v", err)
	}
	before := latest.count()
	for range 3 {
		if err := w.Write(context.Background(), testRows(uuid.New(), 0, 10)); !errors.Is(err, storage.ErrUnavailable) {
			t.Fatalf("a write after a failed sync: %v, want storage unavailable", err)
		}
	}
	if n := latest.count(); n != before {
		t.Fatalf("refused writes changed the latest values: %d rows, had %d", n, before)
	}
	if err := s.Flush(context.Background()); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("flush after a failed sync: %v", err)
	}
	s.Close(context.Background()) // returns: its flush gives up too
}
