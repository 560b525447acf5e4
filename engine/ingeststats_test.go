package engine

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// memCounters is a storage.Counters in memory; fail makes the next AddCounters
// fail for the deltas it selects (all when it returns true for all).
type memCounters struct {
	mu   sync.Mutex
	m    map[uuid.UUID]map[string]int64
	fail func(storage.CounterDelta) bool
}

func (c *memCounters) AddCounters(_ context.Context, deltas []storage.CounterDelta) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[uuid.UUID]map[string]int64{}
	}
	var failed []storage.CounterDelta
	for _, d := range deltas {
		if c.fail != nil && c.fail(d) {
			failed = append(failed, d)
			continue
		}
		if c.m[d.EntityID] == nil {
			c.m[d.EntityID] = map[string]int64{}
		}
		c.m[d.EntityID][d.Name] += d.Delta
	}
	c.fail = nil
	if failed != nil {
		return &storage.FailedDeltasError{Failed: failed, Err: errors.New("some failed")}
	}
	return nil
}

func (c *memCounters) Counters(_ context.Context, id uuid.UUID) (map[string]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m[id]), nil
}

func (c *memCounters) DeleteCounters(_ context.Context, id uuid.UUID) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
	return nil
}

func rowsOf(ids ...uuid.UUID) []storage.Row {
	var rows []storage.Row
	for _, id := range ids {
		rows = append(rows, storage.Row{EntityID: id})
	}
	return rows
}

func TestIngestStatsTally(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	store := &memCounters{}
	f := func(storedOnAck bool, count func(s *IngestStats), want map[uuid.UUID]map[string]int64) {
		t.Helper()
		store.m = nil
		s := NewIngestStats(storedOnAck)
		s.store = store
		count(s)
		if err := s.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		for id, w := range want {
			if got := store.m[id]; !maps.Equal(got, w) {
				t.Fatalf("%s: %v, want %v", id, got, w)
			}
		}
	}
	f(false, func(s *IngestStats) { s.Accepted(rowsOf(a, a, b, a)) },
		map[uuid.UUID]map[string]int64{a: {"accepted": 3}, b: {"accepted": 1}})
	f(true, func(s *IngestStats) { s.Accepted(rowsOf(a, a)) },
		map[uuid.UUID]map[string]int64{a: {"accepted": 2, "stored": 2}})
	f(false, func(s *IngestStats) { s.Stored(rowsOf(b, b, b)) },
		map[uuid.UUID]map[string]int64{b: {"stored": 3}})
	f(false, func(s *IngestStats) {
		s.Rejected(rowsOf(a, a, a), "queue_full")
		s.Rejected(rowsOf(a), "queue_full")
		s.RejectedRequest(a, RejectInvalid)
		s.RejectedRequest(b, "new_reason")
	}, map[uuid.UUID]map[string]int64{
		a: {"rejected:queue_full": 2, "rejectedPoints:queue_full": 4, "rejected:invalid": 1},
		b: {"rejected:new_reason": 1},
	})

	var none *IngestStats // a nil tally counts nothing and never fails
	none.Accepted(rowsOf(a))
	none.Rejected(rowsOf(a), "x")
	none.RejectedRequest(a, "x")
	if err := errors.Join(none.Flush(t.Context()), none.Close(t.Context())); err != nil {
		t.Fatal(err)
	}
}

// TestIngestStatsFlushRetries: deltas the store did not take are added at the
// next flush, and only those (no double counting of the ones it took).
func TestIngestStatsFlushRetries(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	store := &memCounters{}
	s := NewIngestStats(false)
	s.Start(store, 1<<40, nil) // flushed by hand below
	s.Accepted(rowsOf(a, b))
	store.fail = func(d storage.CounterDelta) bool { return d.EntityID == b }
	if err := s.Flush(t.Context()); err == nil {
		t.Fatal("partial failure not reported")
	}
	s.Accepted(rowsOf(b))
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if store.m[a]["accepted"] != 1 || store.m[b]["accepted"] != 2 {
		t.Fatalf("after retry: a %v, b %v", store.m[a], store.m[b])
	}
	store.fail = func(storage.CounterDelta) bool { return true }
	s.Accepted(rowsOf(a))
	if err := s.Flush(t.Context()); err == nil {
		t.Fatal("failure not reported")
	}
	if err := s.Flush(t.Context()); err != nil || store.m[a]["accepted"] != 2 {
		t.Fatalf("after total failure and retry: %v, %v", store.m[a], err)
	}
}

// TestDeviceIngestStats: the counts come back as the REST body has them, with
// the access of GetDevice.
func TestDeviceIngestStats(t *testing.T) {
	te := newTestEngine(t)
	ctx := t.Context()
	dev := te.demo.DemoDeviceID
	s := NewIngestStats(true)
	s.Start(te.store.(storage.Counters), 1<<40, nil)
	s.Accepted(rowsOf(dev, dev))
	s.Rejected(rowsOf(dev), "spool_full")
	s.RejectedRequest(dev, RejectTooLarge)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := te.DeviceIngestStats(ctx, te.tenantAdmin(t), dev)
	if err != nil {
		t.Fatal(err)
	}
	want := DeviceIngestStats{DeviceID: dev, Accepted: 2, Stored: 2,
		Rejected:       map[string]int64{"spool_full": 1, "too_large": 1},
		RejectedPoints: map[string]int64{"spool_full": 1}}
	if got.DeviceID != want.DeviceID || got.Accepted != want.Accepted || got.Stored != want.Stored ||
		!maps.Equal(got.Rejected, want.Rejected) || !maps.Equal(got.RejectedPoints, want.RejectedPoints) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}

	// Access as GetDevice: the demo customer does not see the tenant's demo
	// device, another tenant gets not found or denied, sysadmin is denied.
	_, err = te.DeviceIngestStats(ctx, te.customerUser(t), dev)
	wantCode(t, err, CodePermissionDenied)
	_, err = te.DeviceIngestStats(ctx, te.newTenant(t, "other", "other@example.com"), dev)
	wantCode(t, err, CodePermissionDenied)
	_, err = te.DeviceIngestStats(ctx, te.sysadmin(t), dev)
	wantCode(t, err, CodePermissionDenied)
	_, err = te.DeviceIngestStats(ctx, te.tenantAdmin(t), uuid.New())
	wantCode(t, err, CodeItemNotFound)
	cust, err := te.DeviceIngestStats(ctx, te.customerUser(t), te.demo.CustomerDeviceID)
	if err != nil || cust.Accepted != 0 || cust.Rejected == nil {
		t.Fatalf("customer's own device: %+v, %v", cust, err)
	}
}
