package ingest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluice-iot/sluice/internal/pebblelog"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// ErrSpoolFull is returned when the spool holds SpoolConfig.MaxBytes not yet
// delivered to the history store (which is down or too slow).
var ErrSpoolFull = errors.New("telemetry spool is full: the history store is not keeping up or is unreachable; retry later or raise SLUICE_SPOOL_MAX_BYTES")

// Sink receives spooled rows: the history store (ClickHouse). Write must be
// idempotent for identical rows, because a crash between a delivery and the spool
// forgetting it replays the delivery.
type Sink interface {
	Write(ctx context.Context, rows []storage.Row) error
}

// SpoolConfig sizes the spool. Zero fields take the defaults.
type SpoolConfig struct {
	// Dir is the spool's folder.
	Dir string
	// MaxBytes caps the undelivered data; past it Write fails with ErrSpoolFull
	// (default 1 GiB).
	MaxBytes int64
	// BatchRows is how many rows make the drainer deliver at once (default 10000).
	BatchRows int
	// FlushInterval is the longest a row waits before delivery (default 1 s).
	FlushInterval time.Duration
	// Logger receives delivery errors; nil discards.
	Logger *slog.Logger
}

// Spool is the local write-ahead spool in front of a history store that is
// slower or less available than the local disk. Write makes rows durable on disk
// (one synced Pebble batch per call: the ingest shards already group-commit) and
// returns; a drainer delivers them to the sink in large batches, in the order they
// were written, and forgets them only after the sink has them. When the sink is
// down the spool grows and drains when it returns; on restart it drains what a
// previous process left.
type Spool struct {
	cfg  SpoolConfig
	db   *pebble.DB
	sink Sink
	log  *slog.Logger

	seq         atomic.Uint64 // key of the next record
	bytes       atomic.Int64  // undelivered bytes
	rows        atomic.Int64  // undelivered rows
	wake        chan struct{}
	quit        chan struct{}
	done        chan struct{}
	closeOnce   sync.Once
	deliverMu   sync.Mutex   // one delivery at a time: the drainer, Flush or Close
	delivered   atomic.Int64 // rows delivered since start, for tests and metrics
	deliveryErr atomic.Int64 // failed delivery attempts since start
}

// OpenSpool opens (or creates) the spool in cfg.Dir and starts its drainer.
func OpenSpool(cfg SpoolConfig, sink Sink) (*Spool, error) {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 1 << 30
	}
	if cfg.BatchRows <= 0 {
		cfg.BatchRows = 10000
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	db, err := pebble.Open(cfg.Dir, &pebble.Options{
		Logger:                      pebblelog.Logger{L: log.With("component", "spool")},
		MemTableSize:                16 << 20,
		MemTableStopWritesThreshold: 4,
	})
	if err != nil {
		return nil, fmt.Errorf("cannot open the telemetry spool in %s: %w", cfg.Dir, err)
	}
	s := &Spool{cfg: cfg, db: db, sink: sink, log: log,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	if err := s.recover(); err != nil {
		db.Close()
		return nil, err
	}
	go s.drain()
	return s, nil
}

// recover finds the next sequence number and what a previous process left.
func (s *Spool) recover() error {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return err
	}
	defer it.Close()
	var rows []storage.Row
	for it.First(); it.Valid(); it.Next() {
		v := it.Value()
		rows, err = decodeRecord(rows[:0], v)
		if err != nil {
			return fmt.Errorf("telemetry spool record %x: %w", it.Key(), err)
		}
		s.bytes.Add(int64(len(v)))
		s.rows.Add(int64(len(rows)))
	}
	if it.Last() {
		s.seq.Store(binary.BigEndian.Uint64(it.Key()) + 1)
	}
	return it.Error()
}

// Write appends rows durably. It returns ErrSpoolFull when the undelivered data
// has reached MaxBytes, and storage.ErrUnavailable after Close.
func (s *Spool) Write(_ context.Context, rows []storage.Row) error {
	if len(rows) == 0 {
		return nil
	}
	if s.bytes.Load() >= s.cfg.MaxBytes {
		return ErrSpoolFull
	}
	// Encode straight into a batch sized for the record: no intermediate copy.
	size := recordSize(rows)
	b := s.db.NewBatchWithSize(size + 64)
	defer b.Close()
	op := b.SetDeferred(8, size)
	binary.BigEndian.PutUint64(op.Key, s.seq.Add(1)-1)
	op.Value = appendRecord(op.Value[:0], rows)
	if len(op.Value) != size {
		return fmt.Errorf("spool record size %d, want %d", len(op.Value), size)
	}
	op.Finish()
	if err := b.Commit(pebble.Sync); err != nil {
		if errors.Is(err, pebble.ErrClosed) {
			return storage.ErrUnavailable
		}
		return fmt.Errorf("cannot write the telemetry spool: %w", err)
	}
	s.bytes.Add(int64(size))
	if s.rows.Add(int64(len(rows))) >= int64(s.cfg.BatchRows) {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// Depth reports the undelivered rows and bytes.
func (s *Spool) Depth() (rows, bytes int64) { return s.rows.Load(), s.bytes.Load() }

// drain delivers spooled records, oldest first, whenever BatchRows have gathered
// or FlushInterval has passed; on a sink error it retries with backoff and keeps
// the data.
func (s *Spool) drain() {
	defer close(s.done)
	tick := time.NewTicker(s.cfg.FlushInterval)
	defer tick.Stop()
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-s.quit:
			return
		case <-s.wake:
		case <-tick.C:
		}
		for s.rows.Load() > 0 {
			err := s.deliverOnce()
			if err == nil {
				backoff = 100 * time.Millisecond
				if s.rows.Load() < int64(s.cfg.BatchRows) {
					break // the rest waits for the next tick or wake-up
				}
				continue
			}
			s.deliveryErr.Add(1)
			s.log.Warn("telemetry spool cannot deliver; keeping the data and retrying", "err", err, "retryIn", backoff,
				"spooledRows", s.rows.Load(), "spooledBytes", s.bytes.Load())
			select {
			case <-s.quit:
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}
}

// deliverOnce sends up to about BatchRows rows from the oldest records to the sink
// and deletes those records. Deletes are not synced: after a crash the worst case is
// a repeated delivery, which the sink tolerates.
func (s *Spool) deliverOnce() error {
	s.deliverMu.Lock()
	defer s.deliverMu.Unlock()
	it, err := s.db.NewIter(nil)
	if err != nil {
		return err
	}
	var (
		rows  []storage.Row
		keys  [][]byte
		bytes int64
	)
	for it.First(); it.Valid() && len(rows) < s.cfg.BatchRows; it.Next() {
		if rows, err = decodeRecord(rows, it.Value()); err != nil {
			it.Close()
			return err
		}
		keys = append(keys, append([]byte(nil), it.Key()...))
		bytes += int64(len(it.Value()))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	if err := s.sink.Write(context.Background(), rows); err != nil {
		return err
	}
	b := s.db.NewBatch()
	for _, k := range keys {
		b.Delete(k, nil)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	s.bytes.Add(-bytes)
	s.rows.Add(-int64(len(rows)))
	s.delivered.Add(int64(len(rows)))
	return nil
}

// Flush delivers everything spooled so far, or returns the sink's error.
func (s *Spool) Flush(ctx context.Context) error {
	for s.rows.Load() > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.deliverOnce(); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the drainer after one last delivery attempt bounded by ctx (what is
// not delivered stays in the spool for the next start) and closes the spool.
func (s *Spool) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		close(s.quit)
		<-s.done
		for s.rows.Load() > 0 && ctx.Err() == nil {
			if e := s.deliverOnce(); e != nil {
				s.log.Warn("telemetry spool: undelivered rows stay on disk for the next start", "rows", s.rows.Load(), "err", e)
				break
			}
		}
		err = s.db.Close()
	})
	return err
}

// recordSize is the exact length appendRecord will produce.
func recordSize(rows []storage.Row) int {
	n := 1 + uvarintLen(uint64(len(rows)))
	for i := range rows {
		r := &rows[i]
		n += 32 + varintLen(r.Ts) + uvarintLen(uint64(len(r.Key))) + len(r.Key) + 1
		switch r.Value.Type {
		case kv.Bool:
			n++
		case kv.Long:
			n += varintLen(r.Value.Long)
		case kv.Double:
			n += 8
		default:
			n += uvarintLen(uint64(len(r.Value.Str))) + len(r.Value.Str)
		}
	}
	return n
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	return uvarintLen(u)
}
