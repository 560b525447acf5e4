package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// Per-device ingest statistics: how many telemetry points of a device were
// accepted (acknowledged with a 2xx), stored (written by the back end: at the
// acknowledgement on the embedded back end, when the spool delivered them to
// ClickHouse in production), and how many write requests were rejected, by
// reason, with the points of those that parsed. An operator compares them to
// know what a device must send again.
//
// Each node tallies in memory (IngestStats) and adds its deltas to
// storage.Counters every second and at shutdown, so the counts are cluster-wide
// and survive restarts; a crash loses at most the last second of counts (the
// data itself is durable: these are statistics). A delivery replayed after a
// crash counts as stored twice.

// Reasons a device's write is rejected before its points reach the writer; the
// writer's own reasons are ingest.Reason*.
const (
	RejectInvalid     = "invalid"      // 400: the body does not parse or breaks a limit
	RejectTooLarge    = "too_large"    // 413
	RejectUnsupported = "unsupported"  // 415: Content-Type or Content-Encoding
	RejectRateLimited = "rate_limited" // 429: the tenant's rate limit
)

// Counter names in storage.Counters.
const (
	counterAccepted       = "accepted"
	counterStored         = "stored"
	counterRejected       = "rejected:"       // + reason: requests
	counterRejectedPoints = "rejectedPoints:" // + reason: points
)

var (
	pointsStored = metrics.NewCounter(`sluice_points_stored_total`)
	flushErrors  = metrics.NewCounter(`sluice_ingest_stats_flush_errors_total`)
)

// reasonNames holds the counter names and request metric of each known reason,
// so counting a rejection builds no string.
var reasonNames = func() map[string]reasonName {
	m := map[string]reasonName{}
	for _, r := range []string{RejectInvalid, RejectTooLarge, RejectUnsupported, RejectRateLimited, "queue_full", "spool_full", "unavailable", "storage"} {
		m[r] = reasonName{counterRejected + r, counterRejectedPoints + r,
			metrics.NewCounter(`sluice_telemetry_rejected_requests_total{reason="` + r + `"}`)}
	}
	return m
}()

type reasonName struct {
	requests, points string
	metric           *metrics.Counter
}

func namesOf(reason string) reasonName {
	if n, ok := reasonNames[reason]; ok {
		return n
	}
	return reasonName{requests: counterRejected + reason, points: counterRejectedPoints + reason}
}

const statsShards = 64

// IngestStats is a node's tally of per-device counts not yet added to
// storage.Counters. It implements ingest.Tally. A nil *IngestStats counts nothing.
type IngestStats struct {
	storedOnAck bool
	shards      [statsShards]statsShard

	flushMu sync.Mutex // one flush at a time
	store   storage.Counters
	log     *slog.Logger
	failing bool // the last flush failed (logged once per outage)
	quit    chan struct{}
	done    chan struct{}
	stop    sync.Once
}

type statsShard struct {
	mu sync.Mutex
	m  map[statKey]int64
	_  [48]byte // keep shards on separate cache lines
}

type statKey struct {
	id   uuid.UUID
	name string
}

// NewIngestStats returns an empty tally. storedOnAck says the back end has
// stored a point once it is acknowledged (no spool): Accepted counts it stored too.
func NewIngestStats(storedOnAck bool) *IngestStats {
	s := &IngestStats{storedOnAck: storedOnAck}
	for i := range s.shards {
		s.shards[i].m = map[statKey]int64{}
	}
	return s
}

func (s *IngestStats) add(id uuid.UUID, name string, n int64) {
	sh := &s.shards[id[15]%statsShards]
	sh.mu.Lock()
	sh.m[statKey{id, name}] += n
	sh.mu.Unlock()
}

// addRuns adds each run of consecutive rows of one device to its counter: one
// lock per device of a batch, not per row.
func (s *IngestStats) addRuns(rows []storage.Row, name string) {
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].EntityID == rows[i].EntityID {
			j++
		}
		s.add(rows[i].EntityID, name, int64(j-i))
		i = j
	}
}

// Accepted counts acknowledged rows (and stored ones when storedOnAck).
func (s *IngestStats) Accepted(rows []storage.Row) {
	if s == nil {
		return
	}
	s.addRuns(rows, counterAccepted)
	if s.storedOnAck {
		s.Stored(rows)
	}
}

// Stored counts rows the back end holds.
func (s *IngestStats) Stored(rows []storage.Row) {
	if s == nil {
		return
	}
	s.addRuns(rows, counterStored)
	pointsStored.Add(len(rows))
}

// Rejected counts one rejected request of rows[0]'s device and its rows.
func (s *IngestStats) Rejected(rows []storage.Row, reason string) {
	if s == nil || len(rows) == 0 {
		return
	}
	n := namesOf(reason)
	s.add(rows[0].EntityID, n.requests, 1)
	s.addRuns(rows, n.points)
	if n.metric != nil {
		n.metric.Inc()
	}
}

// RejectedRequest counts a request of the device rejected before any point
// parsed (a RejectInvalid, RejectTooLarge or RejectUnsupported answer).
func (s *IngestStats) RejectedRequest(deviceID uuid.UUID, reason string) {
	if s == nil {
		return
	}
	n := namesOf(reason)
	s.add(deviceID, n.requests, 1)
	if n.metric != nil {
		n.metric.Inc()
	}
}

// Start flushes the tally into store every interval until Close. Call it once,
// before Close; counts made before Start wait for the first flush.
func (s *IngestStats) Start(store storage.Counters, interval time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s.store, s.log = store, log
	s.quit, s.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-s.quit:
				return
			case <-tick.C:
				s.Flush(context.Background())
			}
		}
	}()
}

// Close stops the periodic flush and flushes what is left (bounded by ctx).
// Call it after the writer and the spool have closed, before the store.
func (s *IngestStats) Close(ctx context.Context) error {
	if s == nil || s.quit == nil {
		return nil
	}
	s.stop.Do(func() { close(s.quit) })
	<-s.done
	return s.Flush(ctx)
}

// Flush adds the tally to the store. Deltas the store did not take go back into
// the tally for the next flush, so an outage delays counts instead of losing them.
func (s *IngestStats) Flush(ctx context.Context) error {
	if s == nil || s.store == nil {
		return nil
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	var deltas []storage.CounterDelta
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, n := range sh.m {
			if n != 0 {
				deltas = append(deltas, storage.CounterDelta{EntityID: k.id, Name: k.name, Delta: n})
			}
		}
		clear(sh.m)
		sh.mu.Unlock()
	}
	if len(deltas) == 0 {
		return nil
	}
	err := s.store.AddCounters(ctx, deltas)
	if err == nil {
		if s.failing {
			s.failing = false
			s.log.Info("ingest statistics are flushed again")
		}
		return nil
	}
	flushErrors.Inc()
	back := deltas
	var partial *storage.FailedDeltasError
	if errors.As(err, &partial) {
		back = partial.Failed
	}
	for _, d := range back {
		s.add(d.EntityID, d.Name, d.Delta)
	}
	if !s.failing {
		s.failing = true
		s.log.Warn("cannot flush ingest statistics; keeping them for the next flush", "err", err, "counters", len(back))
	}
	return err
}

// DeviceIngestStats is what GET /api/device/{id}/ingestStats answers: points
// accepted and stored, and rejected write requests and their parsed points by
// reason, since the device was created (counted by every node).
type DeviceIngestStats struct {
	DeviceID       uuid.UUID        `json:"deviceId"`
	Accepted       int64            `json:"accepted"`
	Stored         int64            `json:"stored"`
	Rejected       map[string]int64 `json:"rejected"`
	RejectedPoints map[string]int64 `json:"rejectedPoints"`
}

// DeviceIngestStats returns the counts of a device p can see (as GetDevice).
// They lag the node's tally by up to a flush interval (1 s).
func (e *Engine) DeviceIngestStats(ctx context.Context, p *Principal, id uuid.UUID) (*DeviceIngestStats, error) {
	if _, err := e.GetDevice(ctx, p, id); err != nil {
		return nil, err
	}
	c, ok := e.store.(storage.Counters)
	if !ok {
		return nil, errors.New("this storage back end keeps no counters")
	}
	m, err := c.Counters(ctx, id)
	if err != nil {
		return nil, err
	}
	out := &DeviceIngestStats{DeviceID: id, Accepted: m[counterAccepted], Stored: m[counterStored],
		Rejected: map[string]int64{}, RejectedPoints: map[string]int64{}}
	for name, n := range m {
		if r, ok := strings.CutPrefix(name, counterRejected); ok {
			out.Rejected[r] = n
		} else if r, ok := strings.CutPrefix(name, counterRejectedPoints); ok {
			out.RejectedPoints[r] = n
		}
	}
	return out, nil
}
