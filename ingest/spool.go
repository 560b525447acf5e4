package ingest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/pebblelog"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// ErrSpoolFull is returned when the spool holds SpoolConfig.MaxBytes not yet
// delivered to the history store (which is down or too slow).
var ErrSpoolFull = errors.New("telemetry spool is full: the history store is not keeping up or is unreachable; retry later or raise SLUICE_SPOOL_MAX_BYTES")

// Sink receives spooled rows: the history store (ClickHouse). WriteHistory must
// be idempotent for identical rows, because a crash between a delivery and the
// spool forgetting it replays the delivery, and must not keep rows or mayRepeat
// after it returns: the spool reuses them for the next delivery. mayRepeat[i]
// tells whether rows[i] may repeat a point the sink already has (the same entity,
// key and ts): the writer did not say otherwise (Spool.Resolve), or the delivery
// is a retry; nil means every row may.
type Sink interface {
	WriteHistory(ctx context.Context, rows []storage.Row, mayRepeat []bool) error
}

// SpoolConfig sizes the spool. Zero fields take the defaults.
type SpoolConfig struct {
	// Dir is the spool's folder.
	Dir string
	// MaxBytes caps the undelivered data; past it Write fails with ErrSpoolFull
	// (default 1 GiB).
	MaxBytes int64
	// BatchRows is how many rows make the drainer deliver at once (default 100000:
	// on ClickHouse 18.16 an insert costs 10-20 ms whatever its size, so 10,000-row
	// inserts got 120-160k rows/s into it and 100,000-row ones 550-600k, per lane;
	// storage/clickhouse BenchmarkWrite).
	BatchRows int
	// FlushInterval is the longest a row waits before delivery (default 1 s).
	FlushInterval time.Duration
	// Shards is the number of parallel deliveries (default 4, at most 256). A
	// device always maps to the same shard, so its writes reach the sink in order.
	Shards int
	// Logger receives delivery errors; nil discards.
	Logger *slog.Logger
	// Tally, when set, counts the rows delivered to the sink per device.
	Tally Tally
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

	seq       atomic.Uint64 // sequence number of the next record, over all shards
	bytes     atomic.Int64  // undelivered bytes, over all shards (MaxBytes applies to it)
	lanes     []*lane
	quit      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	delivered atomic.Int64 // rows delivered since start, for tests and metrics
}

// lane is one shard of the spool: its records are keys [shard byte | seq], and one
// drainer delivers them in order.
type lane struct {
	shard     byte
	rows      atomic.Int64 // undelivered rows of this shard
	wake      chan struct{}
	deliverMu sync.Mutex // one delivery at a time: the drainer, Flush or Close

	// Scratch of deliverOnce, reused under deliverMu: a delivery decodes up to
	// BatchRows rows, and allocating them anew each time (with every key name
	// copied per row) was most of a node's allocation under load, and its GC
	// cycles the ClickHouse cells' tail latency (bench/RESULTS.md).
	scratch []storage.Row
	repeat  []bool
	keys    [][9]byte
	names   nameTable
	// failed is set when a delivery fails: the next one may repeat rows the
	// sink took before the failure, so all of its rows may repeat.
	failed bool

	// pending holds the verdicts of records written by WritePending, by
	// sequence number, from just before their commit until Resolve says all
	// their rows may repeat (what a record without a verdict means) or until
	// their delivery. At most maxPending are kept: past that, during a long
	// ClickHouse outage, a record goes without one.
	pendMu  sync.Mutex
	pending map[uint64]*verdict
}

// maxPending bounds a lane's verdicts in memory (about 100 bytes each); a
// variable for tests.
var maxPending = 1 << 16

// verdict is what Resolve said of a pending record: the devices whose rows may
// repeat, the others' rows being new points.
type verdict struct {
	resolved bool
	repeats  []uuid.UUID
}

// Pending is the records of one WritePending, waiting for Resolve.
type Pending struct {
	recs []pendingRecord
}

type pendingRecord struct {
	lane *lane
	seq  uint64
}

// OpenSpool opens (or creates) the spool in cfg.Dir and starts its drainer.
func OpenSpool(cfg SpoolConfig, sink Sink) (*Spool, error) {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 1 << 30
	}
	if cfg.BatchRows <= 0 {
		cfg.BatchRows = 100000
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = time.Second
	}
	if cfg.Shards <= 0 {
		cfg.Shards = 4
	}
	cfg.Shards = min(cfg.Shards, 256)
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
	s := &Spool{cfg: cfg, db: db, sink: sink, log: log, quit: make(chan struct{})}
	for i := range cfg.Shards {
		s.lanes = append(s.lanes, &lane{shard: byte(i), wake: make(chan struct{}, 1), pending: map[uint64]*verdict{}})
	}
	if err := s.recover(); err != nil {
		db.Close()
		return nil, err
	}
	for _, l := range s.lanes {
		s.wg.Add(1)
		go s.drain(l)
	}
	return s, nil
}

// recover finds the next sequence number and what a previous process left. A
// spool written with more shards than configured now is still drained: its extra
// shards' records are delivered by the lane of shard % Shards.
func (s *Spool) recover() error {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return err
	}
	defer it.Close()
	var rows []storage.Row
	var maxSeq uint64
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != 9 {
			return fmt.Errorf("telemetry spool: unexpected key %x", k)
		}
		if rows, err = decodeRecord(rows[:0], v, nil); err != nil {
			return fmt.Errorf("telemetry spool record %x: %w", k, err)
		}
		if int(k[0]) >= len(s.lanes) {
			return fmt.Errorf("telemetry spool in %s was written with more than %d shards; start with the earlier shard count to drain it", s.cfg.Dir, len(s.lanes))
		}
		s.bytes.Add(int64(len(v)))
		s.lanes[k[0]].rows.Add(int64(len(rows)))
		maxSeq = max(maxSeq, binary.BigEndian.Uint64(k[1:])+1)
	}
	s.seq.Store(maxSeq)
	return it.Error()
}

// shardOf maps a device to its lane with a hash that is stable across restarts,
// so records of one device left by a previous process drain before its new ones.
func (s *Spool) shardOf(id uuid.UUID) int {
	return int(binary.BigEndian.Uint64(id[8:]) % uint64(len(s.lanes)))
}

// Write appends rows durably: one record per shard that the rows' devices map to,
// all in one synced batch. Every row is delivered as a possible repeat of a point
// written before, unless WritePending and Resolve say otherwise. It returns
// ErrSpoolFull when the undelivered data has reached MaxBytes, and
// storage.ErrUnavailable after Close.
func (s *Spool) Write(_ context.Context, rows []storage.Row) error {
	_, err := s.write(rows, false)
	return err
}

// WritePending is Write for a writer that learns which rows repeat earlier points
// only while the spool's sync runs (Spooled asks Redis at the same time): the
// records are durable when it returns, but their rows are not delivered before
// Resolve says which may repeat. The verdict lives in memory: records a process
// left behind when it stopped, or written while a lane holds maxPending verdicts
// already, go as Write's do.
func (s *Spool) WritePending(_ context.Context, rows []storage.Row) (Pending, error) {
	return s.write(rows, true)
}

// Resolve gives the verdict on the records of a WritePending: repeats lists the
// devices whose rows may repeat points written before, or all says every row
// may (the writer could not tell). Every successful WritePending must be
// resolved; until then its records hold up their lanes' deliveries.
func (s *Spool) Resolve(p Pending, repeats []uuid.UUID, all bool) {
	for _, r := range p.recs {
		r.lane.pendMu.Lock()
		if all {
			delete(r.lane.pending, r.seq) // what a record without a verdict means
		} else if v := r.lane.pending[r.seq]; v != nil {
			v.resolved, v.repeats = true, repeats
		}
		r.lane.pendMu.Unlock()
		if r.lane.rows.Load() >= int64(s.cfg.BatchRows) {
			r.lane.wakeUp()
		}
	}
}

func (l *lane) wakeUp() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (s *Spool) write(rows []storage.Row, pending bool) (Pending, error) {
	var p Pending
	if len(rows) == 0 {
		return p, nil
	}
	if s.Full() {
		return p, ErrSpoolFull
	}
	parts := s.split(rows)
	total := 0
	for _, p := range parts {
		total += recordSize(p) + 9
	}
	b := s.db.NewBatchWithSize(total + 64)
	defer b.Close()
	var size int64
	for shard, part := range parts {
		if len(part) == 0 {
			continue
		}
		// Encode straight into the batch's buffer: no intermediate copy.
		n := recordSize(part)
		op := b.SetDeferred(9, n)
		op.Key[0] = byte(shard)
		seq := s.seq.Add(1) - 1
		binary.BigEndian.PutUint64(op.Key[1:], seq)
		op.Value = appendRecord(op.Value[:0], part)
		if len(op.Value) != n {
			return p, fmt.Errorf("spool record size %d, want %d", len(op.Value), n)
		}
		op.Finish()
		size += int64(n)
		if pending {
			// Registered before the commit: a drainer must never see the
			// record without its (unresolved) verdict.
			l := s.lanes[shard]
			l.pendMu.Lock()
			if len(l.pending) < maxPending {
				l.pending[seq] = &verdict{}
				p.recs = append(p.recs, pendingRecord{l, seq})
			}
			l.pendMu.Unlock()
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		for _, r := range p.recs {
			r.lane.pendMu.Lock()
			delete(r.lane.pending, r.seq)
			r.lane.pendMu.Unlock()
		}
		if errors.Is(err, pebble.ErrClosed) {
			return Pending{}, storage.ErrUnavailable
		}
		return Pending{}, fmt.Errorf("cannot write the telemetry spool: %w", err)
	}
	s.bytes.Add(size)
	for shard, part := range parts {
		if len(part) > 0 && s.lanes[shard].rows.Add(int64(len(part))) >= int64(s.cfg.BatchRows) && !pending {
			s.lanes[shard].wakeUp()
		}
	}
	return p, nil
}

// Full reports whether the undelivered data has reached MaxBytes, so that Write
// would fail with ErrSpoolFull.
func (s *Spool) Full() bool { return s.bytes.Load() >= s.cfg.MaxBytes }

// split groups rows by shard, keeping their order. With one shard, or when every
// row maps to the same shard (one device per request is the common case), it
// returns rows itself without copying.
func (s *Spool) split(rows []storage.Row) [][]storage.Row {
	parts := make([][]storage.Row, len(s.lanes))
	first := s.shardOf(rows[0].EntityID)
	same := true
	for i := 1; i < len(rows) && same; i++ {
		same = rows[i].EntityID == rows[0].EntityID || s.shardOf(rows[i].EntityID) == first
	}
	if same {
		parts[first] = rows
		return parts
	}
	for _, r := range rows {
		k := s.shardOf(r.EntityID)
		parts[k] = append(parts[k], r)
	}
	return parts
}

// Depth reports the undelivered rows and bytes.
func (s *Spool) Depth() (rows, bytes int64) {
	for _, l := range s.lanes {
		rows += l.rows.Load()
	}
	return rows, s.bytes.Load()
}

// drain delivers one lane's records, oldest first, whenever BatchRows have
// gathered in it or FlushInterval has passed; on a sink error it retries with
// backoff and keeps the data.
func (s *Spool) drain(l *lane) {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.FlushInterval)
	defer tick.Stop()
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-s.quit:
			return
		case <-l.wake:
		case <-tick.C:
		}
		for l.rows.Load() > 0 {
			// A large backlog drains batch after batch; stop between batches at
			// Close, which makes one bounded last attempt itself.
			select {
			case <-s.quit:
				return
			default:
			}
			held, err := s.deliverOnce(l, false)
			if err == nil {
				backoff = 100 * time.Millisecond
				if held || l.rows.Load() < int64(s.cfg.BatchRows) {
					break // the rest waits for the next tick or wake-up (Resolve wakes a held lane)
				}
				continue
			}
			rows, bytes := s.Depth()
			s.log.Warn("telemetry spool cannot deliver; keeping the data and retrying", "err", err, "retryIn", backoff,
				"shard", l.shard, "spooledRows", rows, "spooledBytes", bytes)
			select {
			case <-s.quit:
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}
}

// deliverOnce sends up to about BatchRows rows from the lane's oldest records to
// the sink and deletes those records. Deletes are not synced: after a crash the
// worst case is a repeated delivery, which the sink tolerates. It stops before a
// pending record not yet resolved (held), unless final: Close's last delivery
// sends such a record with every row as a possible repeat.
func (s *Spool) deliverOnce(l *lane, final bool) (held bool, err error) {
	l.deliverMu.Lock()
	defer l.deliverMu.Unlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{l.shard}, UpperBound: upperBound(l.shard)})
	if err != nil {
		return false, err
	}
	rows, repeat, keys := l.scratch[:0], l.repeat[:0], l.keys[:0]
	if need := int(min(l.rows.Load(), int64(s.cfg.BatchRows))); cap(rows) < need {
		// One allocation of the size this delivery will reach, not a cascade of
		// appends growing to it.
		rows = make([]storage.Row, 0, need)
	}
	defer func() {
		clear(rows) // value strings are the delivery's own; key names stay in l.names
		l.scratch, l.repeat, l.keys = rows[:0], repeat[:0], keys[:0]
	}()
	var bytes int64
	for it.First(); it.Valid() && len(rows) < s.cfg.BatchRows; it.Next() {
		if len(it.Key()) != 9 {
			it.Close()
			return false, fmt.Errorf("telemetry spool: unexpected key %x", it.Key())
		}
		seq := binary.BigEndian.Uint64(it.Key()[1:])
		l.pendMu.Lock()
		v, pending := l.pending[seq]
		var said verdict
		if pending {
			said = *v
		}
		l.pendMu.Unlock()
		if pending && !said.resolved && !final {
			held = true
			break
		}
		from := len(rows)
		if rows, err = decodeRecord(rows, it.Value(), &l.names); err != nil {
			it.Close()
			return false, err
		}
		// A row may repeat one the sink has unless its writer's verdict says it
		// is new (a record without one: Write's, a previous process's, which may
		// have delivered it before it crashed) or when a failed delivery may have
		// delivered part of this one.
		all := !said.resolved || l.failed
		for i := from; i < len(rows); i++ {
			repeat = append(repeat, all || slices.Contains(said.repeats, rows[i].EntityID))
		}
		keys = append(keys, [9]byte(it.Key()))
		bytes += int64(len(it.Value()))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return held, err
	}
	if len(keys) == 0 {
		return held, nil
	}
	if err := s.sink.WriteHistory(context.Background(), rows, repeat); err != nil {
		spoolDeliverError.Inc()
		l.failed = true
		return held, err
	}
	spoolDelivered.Add(len(rows))
	if s.cfg.Tally != nil {
		s.cfg.Tally.Stored(rows)
	}
	b := s.db.NewBatch()
	for i := range keys {
		b.Delete(keys[i][:], nil)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		l.failed = true // the records stay and go again
		return held, err
	}
	l.failed = false
	l.pendMu.Lock()
	for i := range keys {
		delete(l.pending, binary.BigEndian.Uint64(keys[i][1:]))
	}
	l.pendMu.Unlock()
	s.bytes.Add(-bytes)
	l.rows.Add(-int64(len(rows)))
	s.delivered.Add(int64(len(rows)))
	return held, nil
}

// upperBound is the first key past a shard's records.
func upperBound(shard byte) []byte {
	if shard == 255 {
		return nil
	}
	return []byte{shard + 1}
}

// Flush delivers everything spooled so far, or returns the sink's error. A
// pending record not yet resolved goes with every row as a possible repeat.
func (s *Spool) Flush(ctx context.Context) error {
	for _, l := range s.lanes {
		for l.rows.Load() > 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if _, err := s.deliverOnce(l, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close stops the drainers after one last delivery attempt bounded by ctx (what
// is not delivered stays in the spool for the next start) and closes the spool.
func (s *Spool) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		close(s.quit)
		s.wg.Wait()
		if e := s.Flush(ctx); e != nil {
			rows, _ := s.Depth()
			s.log.Warn("telemetry spool: undelivered rows stay on disk for the next start", "rows", rows, "err", e)
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
