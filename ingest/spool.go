package ingest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/version"
	"github.com/sluice-iot/sluice/storage"
)

// ErrSpoolFull is returned when the spool's log from some lane's oldest
// undelivered record on has reached SpoolConfig.MaxBytes: the history store is
// down or too slow, for that lane at least.
var ErrSpoolFull = errors.New("telemetry spool is full: the history store is not keeping up or is unreachable; retry later or raise SLUICE_SPOOL_MAX_BYTES")

// Sink receives spooled rows: the history store (ClickHouse). WriteHistory must
// be idempotent for identical rows, because a crash between a delivery and the
// spool forgetting it replays the delivery, and must not keep rows, mayRepeat or
// vers after it returns: the spool reuses them for the next delivery. mayRepeat[i]
// tells whether rows[i] may repeat a point the sink already has (the same entity,
// key and ts): the writer did not say otherwise (Spool.Resolve), or the delivery
// is a retry; nil means every row may. vers[i] is rows[i]'s version
// (internal/version), taken when the spool took the row, so a replay carries the
// same; 0 for rows of records written before versions were (the sink takes one).
type Sink interface {
	WriteHistory(ctx context.Context, rows []storage.Row, mayRepeat []bool, vers []uint64) error
}

// SpoolConfig sizes the spool. Zero fields take the defaults.
type SpoolConfig struct {
	// Dir is the spool's folder.
	Dir string
	// MaxBytes caps the spool's log from each lane's oldest undelivered record
	// on: a write that would pass it fails with ErrSpoolFull (default 1 GiB),
	// unless the spool is empty (Spool.room). It bounds the disk, not only the
	// undelivered rows: a lane that cannot deliver keeps every segment from its
	// position on, the other lanes' delivered records included, so the folder
	// holds at most MaxBytes and one segment more (or one write larger than
	// MaxBytes, taken by an empty spool, and a segment).
	MaxBytes int64
	// BatchRows is how many rows make the drainer deliver at once (default 100000:
	// on ClickHouse 18.16 an insert costs 10-20 ms whatever its size, so 10,000-row
	// inserts got 120-160k rows/s into it and 100,000-row ones 550-600k, per lane;
	// storage/clickhouse BenchmarkWrite).
	BatchRows int
	// FlushInterval is the longest a row waits before delivery (default 1 s).
	FlushInterval time.Duration
	// Shards is the number of parallel deliveries (default 4, at most maxShards). A
	// device always maps to the same shard, so its writes reach the sink in order.
	// A spool that holds undelivered records keeps the count they were written
	// with (a device's new rows must queue behind its old ones); a new count
	// applies at a start that finds the spool delivered.
	Shards int
	// Logger receives delivery errors; nil discards.
	Logger *slog.Logger
	// Tally, when set, counts the rows delivered to the sink per device.
	Tally Tally
}

// Spool is the local write-ahead spool in front of a history store that is
// slower or less available than the local disk. Write makes rows durable on disk
// (appended to the spool's log and synced; concurrent writes share a sync) and
// returns; a drainer per lane delivers them to the sink in large batches, in the
// order they were written, and the log forgets them, a segment file at a time,
// once every lane has delivered what the segment holds. When the sink is down the
// spool grows and drains when it returns; on restart it drains what a previous
// process left.
type Spool struct {
	cfg  SpoolConfig
	sink Sink
	log  *slog.Logger
	done *cursors
	lock *os.File // dir/spool.lock, held while open (lockDir)

	// wmu orders appends: sequence numbers, the segment being written, its
	// rotation.
	wmu      sync.Mutex
	seq      uint64
	active   *segment
	activeID atomic.Uint64
	closed   bool
	// syncMu runs one fsync at a time; the writes waiting behind it usually
	// find theirs covered when it is their turn (group commit).
	syncMu  sync.Mutex
	syncErr atomic.Pointer[error] // the first failed sync: the spool takes no more writes

	segMu sync.RWMutex
	segs  []*segment // oldest first, the active one last

	bytes     atomic.Int64 // undelivered record bytes, over all lanes
	end       atomic.Int64 // the log's end, counted from its first segment (see segment.base)
	lanes     []*lane
	quit      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	delivered atomic.Int64 // rows delivered since start, for tests and metrics
	// taken counts the deliveries the sink took, parts of a record included
	// (deliverApart).
	taken  atomic.Uint64
	deadMu sync.Mutex // one dead-letter file written at a time
}

// lane is one shard of the spool: a device's records always go to the same lane,
// and one drainer delivers a lane's records in order. Every lane reads the one
// log, passing over the other lanes' records.
type lane struct {
	shard     byte
	rows      atomic.Int64 // undelivered rows of this lane
	wake      chan struct{}
	deliverMu sync.Mutex // one delivery at a time: the drainer, Flush or Close

	// Under deliverMu: pos is the first record the lane has not delivered (or
	// passed over), done the sequence number below which its records are
	// delivered (what a previous process delivered is skipped on restart), rd
	// its read-ahead buffer. posSeg publishes pos.seg for segment removal,
	// posAt pos in log bytes (segment.base) for Full.
	pos    position
	done   uint64
	rd     reader
	posSeg atomic.Uint64
	posAt  atomic.Int64
	// first is where the lane's first record after a time with nothing to
	// deliver starts, in log bytes: an idle lane's pos is not moved past the
	// other lanes' records before its next delivery, but none of its own lies
	// before first. Set under Spool.wmu, as last: its last record's sequence
	// number plus one (FlushEntity).
	first atomic.Int64
	last  atomic.Uint64

	// Scratch of deliverOnce, reused under deliverMu: a delivery decodes up to
	// BatchRows rows, and allocating them anew each time (with every key name
	// copied per row) was most of a node's allocation under load, and its GC
	// cycles the ClickHouse cells' tail latency (bench/RESULTS.md).
	scratch []storage.Row
	repeat  []bool
	vers    []uint64
	seqs    []uint64
	dec     recordReader
	// repeatBelow is one past the last record a failed delivery sent: the
	// sink may have taken any of them (an answer lost after the insert, one
	// shard of a cluster that took its part), so every row of those records
	// may repeat, however many deliveries it takes to send them again. shrink
	// halves the rows of each delivery after a failed one, down to a record: a
	// delivery the sink refuses for its size (ClickHouse's memory limit on a
	// batch of large values) gets in in parts instead of stopping the lane.
	// Back to BatchRows after a success.
	repeatBelow uint64
	shrink      int
	// stuck is one past the sequence number of the record whose deliveries
	// of it alone the sink refused in a row, not for being unavailable (0:
	// none); stuckTries counts them, stuckTaken is Spool.taken at the last.
	// See refusedTries.
	stuck      uint64
	stuckTries int
	stuckTaken uint64

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

// OpenSpool opens (or creates) the spool in cfg.Dir and starts its drainers. A
// spool left by a version that kept it in Pebble is moved into the log first.
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
	cfg.Shards = min(cfg.Shards, maxShards)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create the telemetry spool folder: %w", err)
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("cannot open the telemetry spool in %s: %w", cfg.Dir, err)
	}
	if err := migratePebble(cfg.Dir, log); err != nil {
		lock.Close()
		return nil, fmt.Errorf("cannot move the telemetry spool in %s out of Pebble: %w", cfg.Dir, err)
	}
	// A dead-letter file a crash left unfinished: its rows are still in the
	// log, whose record was not done, and go again (removeDeadLetterTemps).
	if n, err := removeDeadLetterTemps(cfg.Dir); err != nil {
		lock.Close()
		return nil, fmt.Errorf("cannot remove the unfinished dead-letter files in %s: %w", cfg.Dir, err)
	} else if n > 0 {
		log.Warn("telemetry spool: removed unfinished dead-letter files (left by a crash); their rows are still in the spool, or in the file a replay was replaying", "files", n)
	}
	s := &Spool{cfg: cfg, sink: sink, log: log, lock: lock, quit: make(chan struct{})}
	if err := s.recover(); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("cannot open the telemetry spool in %s: %w", cfg.Dir, err)
	}
	for _, l := range s.lanes {
		s.wg.Add(1)
		go s.drain(l)
	}
	return s, nil
}

// recover reads what a previous process left: every segment, counting the
// records the lanes have not delivered, and passing over damage (checkTail);
// then it makes the lanes and starts a new segment for this process's writes.
func (s *Spool) recover() error {
	var err error
	if s.done, err = openCursors(s.cfg.Dir); err != nil {
		return err
	}
	// By lane number as the records have it, whatever the count configured now.
	var done, last [maxShards]uint64
	var rows [maxShards]int64
	for k := range done {
		done[k] = s.done.load(byte(k))
		s.seq = max(s.seq, done[k]) // a sequence number is never used twice, even after the log emptied
	}
	lanes := 0 // the highest lane number with undelivered records, plus one
	ids, err := listSegments(s.cfg.Dir)
	if err != nil {
		return err
	}
	var base int64
	var next uint64 // one past the last record's sequence number, in log order
	for i, id := range ids {
		newest := i == len(ids)-1
		flag := os.O_RDONLY
		if newest {
			flag = os.O_RDWR // for cutting off a torn tail
		}
		f, err := os.OpenFile(filepath.Join(s.cfg.Dir, segName(id)), flag, 0)
		if err != nil {
			return err
		}
		seg := &segment{id: id, f: f, base: base}
		s.segs = append(s.segs, seg)
		sc, err := scanSegment(f, next, func(h recHeader, payload []byte) error {
			s.seq = max(s.seq, h.seq+1)
			if h.seq < done[h.lane] {
				return nil
			}
			n, err := recordRows(payload)
			if err != nil {
				return fmt.Errorf("segment %s: %w", segName(id), err)
			}
			rows[h.lane] += int64(n)
			last[h.lane] = h.seq + 1
			lanes = max(lanes, int(h.lane)+1)
			s.bytes.Add(int64(len(payload)))
			return nil
		})
		if err != nil {
			return err
		}
		next = sc.next
		if err := s.checkTail(seg, sc, newest); err != nil {
			return err
		}
		seg.holes = sc.holes
		seg.size = sc.end
		seg.durable.Store(sc.end)
		seg.sealed.Store(true)
		base += sc.end
	}
	shards, err := s.shardCount(lanes)
	if err != nil {
		return err
	}
	for k := range shards {
		l := &lane{shard: byte(k), done: done[k], wake: make(chan struct{}, 1), pending: map[uint64]*verdict{}}
		l.rows.Store(rows[k])
		l.last.Store(last[k])
		s.lanes = append(s.lanes, l)
	}
	nextID := uint64(1)
	if len(ids) > 0 {
		nextID = ids[len(ids)-1] + 1
	}
	if err := s.startSegment(nextID); err != nil {
		return err
	}
	first := s.segs[0].id
	for _, l := range s.lanes {
		s.setPos(l, position{seg: first})
		l.posSeg.Store(first)
	}
	return nil
}

// checkTail tells apart, in a segment scanned at recovery, a write cut off by
// a crash from damage. Only the newest segment can end in a cut-off write,
// which was never acknowledged: it is cut off the file (and the cut synced),
// so that the segment, no longer the newest at the next start, does not look
// damaged then. Every other segment was whole and synced when the next one
// was started (Spool.rotate), so bytes that do not check out at its end are
// damage, as are those before records that do (segScan.holes) in any segment.
// The records in damaged bytes are lost, the others are delivered; the
// segment is kept aside under another name for whoever recovers the damaged
// bytes by hand, and the start says so loudly instead of passing over them in
// silence. (A cut-off write whose later pages reached the disk before its
// earlier ones looks like damage too; its copy then holds nothing that was
// acknowledged.)
func (s *Spool) checkTail(seg *segment, sc segScan, newest bool) error {
	path := filepath.Join(s.cfg.Dir, segName(seg.id))
	damage := sc.holes
	if sc.end < sc.size {
		if !newest {
			damage = append(slices.Clip(damage), span{sc.end, sc.size})
		} else {
			s.log.Warn("telemetry spool: a write cut off by a crash ends the newest segment; it was never acknowledged, and is cut off",
				"segment", path, "offset", sc.end, "bytes", sc.size-sc.end)
			// A damaged segment's copy (below) is the same file: it loses
			// this tail too, which holds nothing acknowledged.
			if err := seg.f.Truncate(sc.end); err != nil {
				return fmt.Errorf("cannot cut the torn tail off segment %s: %w", path, err)
			}
			if err := syncData(seg.f); err != nil {
				return fmt.Errorf("cannot cut the torn tail off segment %s: %w", path, err)
			}
		}
	}
	if len(damage) == 0 {
		return nil
	}
	spoolDamaged.Inc()
	kept := path + ".damaged"
	if err := os.Link(path, kept); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("segment %s is damaged at %v and cannot be kept aside: %w", path, damage, err)
	}
	var lost int64
	for _, d := range damage {
		lost += d.to - d.from
	}
	s.log.Error("telemetry spool: a segment is damaged; the records in the damaged bytes are not delivered (those after them are), and a copy is kept",
		"segment", path, "damaged", fmt.Sprint(damage), "bytesNotDelivered", lost, "copy", kept)
	return nil
}

// shardCount returns the number of lanes: the one configured, unless records
// are left undelivered in lanes numbered below lanes (0: none) and the folder
// says they were written with another count. Rows of one device written with
// two counts could go to two lanes, delivered side by side, and two writes of
// one point reach the sink in the wrong order.
func (s *Spool) shardCount(lanes int) (int, error) {
	recorded, err := readShards(s.cfg.Dir)
	if err != nil {
		return 0, err
	}
	n := s.cfg.Shards
	if lanes > 0 && recorded > 0 && recorded != n {
		s.log.Warn("telemetry spool: keeping the shard count its undelivered records were written with; the configured one applies at a start that finds them delivered",
			"shards", recorded, "configured", n)
		n = recorded
	}
	if lanes > n {
		// Left by a version that did not record its count.
		return 0, fmt.Errorf("it was written with more than %d shards; start with the earlier shard count to drain it", n)
	}
	if lanes > 0 && recorded == 0 {
		s.log.Warn("telemetry spool: undelivered records of an earlier version, which did not record its shard count; if it ran with another SLUICE_SPOOL_SHARDS, a device's new rows may reach ClickHouse before its old ones",
			"shards", n)
	}
	if n != recorded {
		if err := writeShards(s.cfg.Dir, n); err != nil {
			return 0, fmt.Errorf("cannot record the shard count: %w", err)
		}
	}
	return n, nil
}

// startSegment creates segment id and makes it the one written.
func (s *Spool) startSegment(id uint64) error {
	path := filepath.Join(s.cfg.Dir, segName(id))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if err := syncDir(s.cfg.Dir); err != nil {
		// Removed, so the next rotation can create it again: left there, every
		// later one failed on O_EXCL until a restart.
		return errors.Join(err, f.Close(), os.Remove(path))
	}
	seg := &segment{id: id, f: f}
	if last := s.lastSegment(); last != nil {
		seg.base = last.base + last.size // the last one's size is final: under wmu, or recovered
	}
	s.segMu.Lock()
	s.segs = append(s.segs, seg)
	s.segMu.Unlock()
	// Sealed only now that the next segment is listed: a lane at the old one's
	// end finds where to go on.
	if s.active != nil {
		s.active.sealed.Store(true)
	}
	s.active = seg
	s.activeID.Store(id)
	s.end.Store(seg.base)
	return nil
}

func (s *Spool) lastSegment() *segment {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	if len(s.segs) == 0 {
		return nil
	}
	return s.segs[len(s.segs)-1]
}

// at returns pos in log bytes, counted from the first segment.
func (s *Spool) at(pos position) int64 {
	if seg := s.segmentAt(pos.seg); seg != nil {
		return seg.base + pos.off
	}
	return s.end.Load() // not listed: a lane is never behind a removed segment
}

// setPos moves the lane to pos; under its deliverMu.
func (s *Spool) setPos(l *lane, pos position) {
	l.pos = pos
	l.posAt.Store(s.at(pos))
}

// segmentAt returns the listed segment id, or nil.
func (s *Spool) segmentAt(id uint64) *segment {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	for _, seg := range s.segs {
		if seg.id == id {
			return seg
		}
	}
	return nil
}

// segmentAfter returns the listed segment after id, or nil.
func (s *Spool) segmentAfter(id uint64) *segment {
	s.segMu.RLock()
	defer s.segMu.RUnlock()
	for _, seg := range s.segs {
		if seg.id > id {
			return seg
		}
	}
	return nil
}

// shardOf maps a device to its lane with a hash that is stable across restarts,
// so records of one device left by a previous process drain before its new ones.
func (s *Spool) shardOf(id uuid.UUID) int {
	return int(binary.BigEndian.Uint64(id[8:]) % uint64(len(s.lanes)))
}

// Write appends rows durably: one record per lane that the rows' devices map to,
// all in one append and one sync. Every row is delivered as a possible repeat of
// a point written before, unless WritePending and Resolve say otherwise. It
// returns ErrSpoolFull when the spool is Full or the rows would pass MaxBytes
// (Spool.room), and storage.ErrUnavailable after Close.
func (s *Spool) Write(_ context.Context, rows []storage.Row) error {
	_, err := s.write(rows, false, 0, nil)
	return err
}

// WritePending is Write for a writer that learns which rows repeat earlier points
// only while the spool's sync runs (Spooled asks Redis at the same time): the
// records are durable when it returns, but their rows are not delivered before
// Resolve says which may repeat. The verdict lives in memory: records a process
// left behind when it stopped, or written while a lane holds maxPending verdicts
// already, go as Write's do.
func (s *Spool) WritePending(_ context.Context, rows []storage.Row) (Pending, error) {
	return s.write(rows, true, 0, nil)
}

// WritePendingAt is WritePending with the rows' versions taken from base on,
// as RowVersions numbers them: the caller knows them before the write, and the
// latest store can tell them from a delete's (Spooled.Write).
func (s *Spool) WritePendingAt(_ context.Context, rows []storage.Row, base uint64) (Pending, error) {
	return s.write(rows, true, base, nil)
}

// RowVersions is the version each of rows gets in a write from base: a lane's
// rows are one record (or consecutive ones) whose rows count up from its
// version, and the lanes follow one another in order.
func (s *Spool) RowVersions(rows []storage.Row, base uint64) []uint64 {
	vers := make([]uint64, len(rows))
	_, byLane := s.split(rows, nil)
	if byLane == nil {
		for i := range vers {
			vers[i] = base + uint64(i)
		}
		return vers
	}
	next := base
	for _, idx := range byLane {
		for _, i := range idx {
			vers[i] = next
			next++
		}
	}
	return vers
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

// scratch is a write's reusable memory: the buffer its records are encoded in,
// its rows' indexes by lane, and the encoder's series table.
type scratch struct {
	buf    []byte
	byLane [][]int32
	enc    recordEncoder
}

var writeScratch = sync.Pool{New: func() any { return new(scratch) }}

// part is one lane's record in a write's buffer.
type part struct {
	lane       int
	rows       int
	start, end int // header and payload in the buffer
	crc        uint32
}

// write appends rows as records, as Write and WritePending say. appended, if
// not nil, is called once the records are appended and before their sync: a
// write refused (full, closed, failed, no space left) returns before it.
func (s *Spool) write(rows []storage.Row, pending bool, base uint64, appended func()) (Pending, error) {
	var p Pending
	if len(rows) == 0 {
		return p, nil
	}
	if s.Full() {
		return p, ErrSpoolFull
	}
	// Encode and checksum the payloads before taking the append lock; only the
	// headers (sequence numbers) are filled under it.
	sc := writeScratch.Get().(*scratch)
	defer writeScratch.Put(sc)
	one, byLane := s.split(rows, sc.byLane)
	if byLane != nil {
		sc.byLane = byLane // kept for the next write; nil only means one lane
	}
	// The pooled buffer has grown to the size of earlier writes; a larger one
	// grows it once more.
	buf := sc.buf[:0]
	var partsArr [8]part
	parts := partsArr[:0]
	// The rows' versions: they were acknowledged no earlier than now. From
	// base, they count up lane by lane as RowVersions says.
	next := base
	take := func(n int) uint64 {
		if base == 0 {
			return version.Reserve(n)
		}
		v := next
		next += uint64(n)
		return v
	}
	var add func(lane int, idx []int32)
	add = func(lane int, idx []int32) {
		start := len(buf)
		n := len(rows)
		if idx != nil {
			n = len(idx)
		}
		ver := take(n)
		buf = sc.enc.append(append(buf, make([]byte, recHeaderLen)...), rows, idx, ver)
		if len(buf)-start-recHeaderLen > maxRecordPayload && n > 1 {
			// A header holds a 32-bit length: a lane's rows of a huge group
			// commit go in two records (or more), in order.
			buf = buf[:start]
			if base != 0 {
				next = ver // the halves take these versions again
			}
			if idx == nil {
				idx = make([]int32, n)
				for i := range idx {
					idx[i] = int32(i)
				}
			}
			add(lane, idx[:n/2])
			add(lane, idx[n/2:])
			return
		}
		parts = append(parts, part{lane: lane, rows: n, start: start, end: len(buf),
			crc: crc32.Checksum(buf[start+recHeaderLen:], castagnoli)})
	}
	if byLane == nil {
		add(one, nil)
	}
	for lane, idx := range byLane {
		if len(idx) > 0 {
			add(lane, idx)
		}
	}
	sc.buf = buf

	s.wmu.Lock()
	if err := s.writable(); err != nil {
		s.wmu.Unlock()
		return p, err
	}
	if !s.room(int64(len(buf))) {
		s.wmu.Unlock()
		return p, ErrSpoolFull
	}
	if s.active.size > 0 && s.active.size+int64(len(buf)) > segmentBytes {
		if err := s.rotate(); err != nil {
			s.wmu.Unlock()
			return p, err
		}
	}
	seg := s.active
	var size int64
	for _, pt := range parts {
		seq := s.seq
		s.seq++
		putHeader(buf[pt.start:pt.end], byte(pt.lane), seq, pt.crc)
		s.lanes[pt.lane].last.Store(seq + 1)
		size += int64(pt.end - pt.start - recHeaderLen)
		if pending {
			// Registered before the record can be read: a drainer must never
			// see it without its (unresolved) verdict.
			l := s.lanes[pt.lane]
			l.pendMu.Lock()
			if len(l.pending) < maxPending {
				l.pending[seq] = &verdict{}
				p.recs = append(p.recs, pendingRecord{l, seq})
			}
			l.pendMu.Unlock()
		}
	}
	// A failed write leaves size where it was: the next write overwrites what
	// it left, and the rest is cut off (here if it can be, else at the
	// rotation or at the next start), so that no record of a refused write is
	// found after a later one.
	_, err := seg.f.WriteAt(buf, seg.size)
	if err != nil {
		seg.f.Truncate(seg.size)
	}
	if err == nil {
		// Counted with the append, under wmu: a lane that finds no rows under
		// it knows none of its records lies ahead (lane.skip).
		s.bytes.Add(size)
		for _, pt := range parts {
			l := s.lanes[pt.lane]
			if l.rows.Load() == 0 {
				// Stored before the rows, so that Full never sees them with
				// an earlier first (it may see a later one with rows about to
				// be delivered: for a moment, a full spool that is not).
				l.first.Store(seg.base + seg.size + int64(pt.start))
			}
			l.rows.Add(int64(pt.rows))
		}
		seg.size += int64(len(buf))
		s.end.Store(seg.base + seg.size)
	}
	end := seg.size
	s.wmu.Unlock()
	if err == nil {
		if appended != nil {
			appended()
		}
		err = s.sync(seg, end)
	}
	if err != nil {
		for _, r := range p.recs {
			r.lane.pendMu.Lock()
			delete(r.lane.pending, r.seq)
			r.lane.pendMu.Unlock()
		}
		if errors.Is(err, storage.ErrUnavailable) {
			return Pending{}, err
		}
		// A disk error (no space left, a failed sync) is the storage being
		// unavailable: 503, retry, not 500.
		return Pending{}, fmt.Errorf("%w: cannot write the telemetry spool: %w", storage.ErrUnavailable, err)
	}
	for _, pt := range parts {
		if l := s.lanes[pt.lane]; l.rows.Load() >= int64(s.cfg.BatchRows) && !pending {
			l.wakeUp()
		}
	}
	return p, nil
}

// writable tells why the spool takes no writes, if it does not; under wmu.
func (s *Spool) writable() error {
	if s.closed {
		return storage.ErrUnavailable
	}
	return s.Failed()
}

// Failed is why the spool refuses every write until the node restarts (a
// failed fsync), or nil. It is storage.ErrUnavailable: 503, and /healthz
// reports it.
func (s *Spool) Failed() error {
	if s.syncErr.Load() != nil {
		// The OS error (a file path, an errno) is in the log, not here: this
		// text is what /healthz and every refused device are told.
		return fmt.Errorf("%w: a sync of the telemetry spool failed, so what it holds on disk is uncertain; restart the node (its log names the error)", storage.ErrUnavailable)
	}
	return nil
}

// rotate syncs and seals the active segment and starts the next; under wmu.
func (s *Spool) rotate() error {
	old := s.active
	// What a failed write left past the end goes first: a sealed segment must
	// end with its last record, since recovery takes anything after it for
	// damage (checkTail).
	if err := old.f.Truncate(old.size); err != nil {
		return err
	}
	if err := syncData(old.f); err != nil {
		if s.syncErr.CompareAndSwap(nil, &err) {
			s.log.Error("telemetry spool: fsync failed; refusing writes until restart", "err", err)
		}
		return err
	}
	storeMax(&old.durable, old.size)
	return s.startSegment(old.id + 1)
}

// sync makes seg durable up to at least end. One sync runs at a time, covering
// everything appended to seg before it started; a write that finds its bytes
// covered by the time it gets the lock returns at once.
func (s *Spool) sync(seg *segment, end int64) error {
	if seg.durable.Load() >= end {
		return nil
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if seg.durable.Load() >= end {
		return nil
	}
	if e := s.syncErr.Load(); e != nil {
		return *e
	}
	s.wmu.Lock()
	target := seg.size
	closed := s.closed
	s.wmu.Unlock()
	if closed {
		return storage.ErrUnavailable
	}
	if err := syncData(seg.f); err != nil {
		// After a failed fsync the kernel may have dropped the pages it could
		// not write and report the next one clean: take no more writes (as
		// Pebble and PostgreSQL do); a restart recovers what is on disk.
		if s.syncErr.CompareAndSwap(nil, &err) {
			s.log.Error("telemetry spool: fsync failed; refusing writes until restart", "err", err)
		}
		return err
	}
	storeMax(&seg.durable, target)
	return nil
}

// Full reports whether the log from some lane's oldest undelivered record on
// has reached MaxBytes, so that Write would fail with ErrSpoolFull. Lanes with
// nothing to deliver keep nothing.
func (s *Spool) Full() bool {
	if s.bytes.Load() >= s.cfg.MaxBytes {
		return true
	}
	end := s.end.Load()
	for _, l := range s.lanes {
		if l.rows.Load() > 0 && end-max(l.posAt.Load(), l.first.Load()) >= s.cfg.MaxBytes {
			return true
		}
	}
	return false
}

// room tells whether a write of n bytes keeps the spool within MaxBytes,
// measured as Full does; under wmu, so that the writes that each found the
// spool below the limit (Full, before the lock) do not pass it together, nor
// one large write by far. An empty spool (no lane has rows to deliver) takes
// any write, as it did before this check: a request or group commit larger
// than MaxBytes would otherwise be refused forever, whatever the history
// store does, and a client retrying it would get 503 for good.
func (s *Spool) room(n int64) bool {
	empty := true
	end := s.end.Load() + n
	for _, l := range s.lanes {
		if l.rows.Load() > 0 {
			empty = false
			if end-max(l.posAt.Load(), l.first.Load()) > s.cfg.MaxBytes {
				return false
			}
		}
	}
	return empty || s.bytes.Load()+n <= s.cfg.MaxBytes
}

// split groups rows by lane, keeping their order: byLane[k] lists the indexes of
// lane k's rows (indexes, not copies: a commit of many devices' rows spans
// every lane). When every row maps to one lane (one device per request is the
// common case) it returns that lane as one and byLane nil.
func (s *Spool) split(rows []storage.Row, byLane [][]int32) (one int, _ [][]int32) {
	one = s.shardOf(rows[0].EntityID)
	same := true
	for i := 1; i < len(rows) && same; i++ {
		same = rows[i].EntityID == rows[0].EntityID || s.shardOf(rows[i].EntityID) == one
	}
	if same {
		return one, nil
	}
	byLane = slices.Grow(byLane[:0], len(s.lanes))[:len(s.lanes)]
	for k := range byLane {
		byLane[k] = byLane[k][:0]
	}
	last, lane := rows[0].EntityID, one
	for i := range rows {
		if rows[i].EntityID != last { // rows come in runs of one device
			last, lane = rows[i].EntityID, s.shardOf(rows[i].EntityID)
		}
		byLane[lane] = append(byLane[lane], int32(i))
	}
	return -1, byLane
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
		if l.rows.Load() == 0 && l.posSeg.Load() < s.activeID.Load() {
			s.skip(l) // let the segments behind go
		}
		for l.rows.Load() > 0 {
			// A large backlog drains batch after batch; stop between batches at
			// Close, which makes one bounded last attempt itself.
			select {
			case <-s.quit:
				return
			default:
			}
			n, held, err := s.deliverOnce(l, false)
			if err == nil {
				backoff = 100 * time.Millisecond
				if n == 0 || held || l.rows.Load() < int64(s.cfg.BatchRows) {
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

// skip moves a lane with nothing to deliver to the end of the log, past the
// other lanes' records, so that the segments behind it can go.
func (s *Spool) skip(l *lane) {
	l.deliverMu.Lock()
	s.wmu.Lock()
	if l.rows.Load() == 0 && !s.closed {
		s.setPos(l, position{seg: s.active.id, off: s.active.size})
	}
	s.wmu.Unlock()
	l.posSeg.Store(l.pos.seg)
	l.deliverMu.Unlock()
	s.removeSegments()
}

// removeSegments deletes the segments every lane has gone past.
func (s *Spool) removeSegments() {
	low := uint64(math.MaxUint64)
	for _, l := range s.lanes {
		low = min(low, l.posSeg.Load())
	}
	s.segMu.Lock()
	var gone []*segment
	for len(s.segs) > 1 && s.segs[0].id < low && s.segs[0].sealed.Load() {
		gone = append(gone, s.segs[0])
		s.segs = s.segs[1:]
	}
	s.segMu.Unlock()
	for _, seg := range gone {
		seg.f.Close()
		if err := os.Remove(filepath.Join(s.cfg.Dir, segName(seg.id))); err != nil {
			s.log.Warn("telemetry spool: cannot remove a delivered segment", "segment", segName(seg.id), "err", err)
		}
	}
}

// deliverOnce sends up to about BatchRows rows from the lane's oldest records to
// the sink and moves the lane past them. The move is recorded without a sync:
// after a power cut the worst case is a repeated delivery, which the sink
// tolerates. It stops before a pending record not yet resolved (held), unless
// final: Close's last delivery sends such a record with every row as a possible
// repeat. n is the rows delivered.
func (s *Spool) deliverOnce(l *lane, final bool) (n int, held bool, err error) {
	l.deliverMu.Lock()
	defer l.deliverMu.Unlock()
	rows, repeat, vers, seqs := l.scratch[:0], l.repeat[:0], l.vers[:0], l.seqs[:0]
	if need := int(min(l.rows.Load(), int64(s.cfg.BatchRows))); cap(rows) < need {
		// One allocation of the size this delivery will reach, not a cascade of
		// appends growing to it.
		rows, repeat, vers = make([]storage.Row, 0, need), make([]bool, 0, need), make([]uint64, 0, need)
	}
	defer func() {
		clear(rows) // value strings are the delivery's own; key names stay in l.dec
		l.scratch, l.repeat, l.vers, l.seqs = rows[:0], repeat[:0], vers[:0], seqs[:0]
	}()
	pos := l.pos
	var bytes int64
	limit := s.cfg.BatchRows >> min(l.shrink, 30)
	for len(rows) < max(limit, 1) {
		h, payload, at, next, ok, err := s.record(&l.rd, pos)
		if err != nil {
			return 0, held, err
		}
		if !ok {
			break
		}
		if int(h.lane) != int(l.shard) || h.seq < l.done {
			pos = next // another lane's, or delivered before a restart
			continue
		}
		l.pendMu.Lock()
		v, pending := l.pending[h.seq]
		var said verdict
		if pending {
			said = *v
		}
		l.pendMu.Unlock()
		if pending && !said.resolved && !final {
			held = true
			pos = at
			break
		}
		from := len(rows)
		var ver uint64
		if rows, ver, err = decodeVersioned(rows, payload, &l.dec); err != nil {
			return 0, held, fmt.Errorf("telemetry spool record %d: %w", h.seq, err)
		}
		for i := range len(rows) - from {
			if ver == 0 {
				vers = append(vers, 0) // an earlier version's record: the sink takes one
			} else {
				vers = append(vers, ver+uint64(i))
			}
		}
		// A row may repeat one the sink has unless its writer's verdict says it
		// is new (a record without one: Write's, a previous process's, which may
		// have delivered it before it crashed) or when a failed delivery may have
		// delivered part of this one.
		all := !said.resolved || h.seq < l.repeatBelow
		for i := from; i < len(rows); i++ {
			repeat = append(repeat, all || slices.Contains(said.repeats, rows[i].EntityID))
		}
		seqs = append(seqs, h.seq)
		bytes += int64(len(payload))
		pos = next
	}
	if len(seqs) == 0 {
		s.setPos(l, pos)
		l.posSeg.Store(pos.seg)
		return 0, held, nil
	}
	err = s.sink.WriteHistory(context.Background(), rows, repeat, vers)
	var dead []int
	if err != nil && len(seqs) == 1 && !errors.Is(err, storage.ErrUnavailable) {
		if l.stuck != seqs[0]+1 {
			l.stuck, l.stuckTries, l.stuckTaken = seqs[0]+1, 0, s.taken.Load()
		}
		if l.stuckTries++; l.stuckTries >= refusedTries {
			dead, err = s.deliverApart(l, seqs[0], rows, repeat, vers, err)
		}
		if err != nil {
			// The next try counts what the sink takes from now on: other
			// lanes' deliveries long ago do not show it takes rows now.
			l.stuckTaken = s.taken.Load()
		}
	}
	if err != nil {
		spoolDeliverError.Inc()
		l.repeatBelow = max(l.repeatBelow, seqs[len(seqs)-1]+1)
		l.shrink++
		if len(seqs) > 1 || errors.Is(err, storage.ErrUnavailable) {
			l.stuck = 0 // refusals in a row of that record alone only
		}
		return 0, held, err
	}
	s.taken.Add(1)
	l.stuck = 0
	stored := rows
	if len(dead) > 0 {
		stored = make([]storage.Row, 0, len(rows)-len(dead))
		for i := range rows {
			if !slices.Contains(dead, i) {
				stored = append(stored, rows[i])
			}
		}
	}
	spoolDelivered.Add(len(stored))
	if s.cfg.Tally != nil {
		s.cfg.Tally.Stored(stored)
	}
	l.shrink = 0
	s.setPos(l, pos)
	l.done = seqs[len(seqs)-1] + 1
	if err := s.done.store(l.shard, l.done); err != nil {
		s.log.Warn("telemetry spool: cannot record a delivery; a restart repeats it", "err", err)
	}
	l.pendMu.Lock()
	for _, seq := range seqs {
		delete(l.pending, seq)
	}
	l.pendMu.Unlock()
	s.bytes.Add(-bytes)
	l.rows.Add(-int64(len(rows)))
	s.delivered.Add(int64(len(stored)))
	if l.posSeg.Swap(pos.seg) != pos.seg {
		s.removeSegments()
	}
	return len(rows), held, nil
}

// refusedTries is how many deliveries of one record in a row the sink must
// refuse, not for being unavailable, before the spool delivers its rows apart
// and moves those refused alone to a dead-letter file (deliverApart). The
// lane has retried with backoff and halved its deliveries down to that record
// before (lane.shrink), so a refusal for size has been dealt with; three more
// refusals at up to 5 s apart give a passing server error (a memory limit,
// too many parts) its chances, and a single one would send a record apart
// that a passing refusal met just when the lane got down to it. More would
// only hold the lane, and every lane's writes once it keeps MaxBytes, longer
// for a row that never gets in. Sending apart moves rows only while the sink
// takes others (deliverApart), so a sink that refuses everything for a while
// moves none however long it lasts.
const refusedTries = 3

// deadLetterPrefix starts the names of the dead-letter files in the spool's
// folder; what follows is no segment number, so the log never takes one of
// them for its own (listSegments).
const deadLetterPrefix = "deadletter-"

// deliverApart delivers the rows of the lane's record seq, which the sink
// refused refusedTries times in a row (refusal is its last answer), in
// halves, and halves of the refused halves, down to single rows, and moves
// the rows it refuses alone to a dead-letter file: one row the history store
// never takes no longer holds up its lane for good, nor, once the lane keeps
// MaxBytes of log, every write of the node. It returns their indexes in rows.
// A refusal counts as the row's only if the sink took other rows meanwhile
// (other parts of the record, or any lane's delivery since the record's last
// refusal, one backoff ago): a sink that takes nothing (a read-only or missing table, a full
// disk) would have every row look refused, so then the record stays and is
// retried as before, with refusal. Parts delivered before a failure go again
// with the record, as possible repeats (lane.repeatBelow); parts go out of
// order, which the rows' versions make harmless.
func (s *Spool) deliverApart(l *lane, seq uint64, rows []storage.Row, repeat []bool, vers []uint64, refusal error) ([]int, error) {
	var dead []int
	if err := s.isolate(l, rows, repeat, vers, 0, len(rows), &dead); err != nil {
		return nil, err
	}
	if len(dead) == 0 {
		return nil, nil // every part got in
	}
	if s.taken.Load() == l.stuckTaken {
		return nil, refusal // a record of one row, and nothing else got in
	}
	path, err := s.deadLetter(l.shard, seq, rows, vers, dead)
	if err != nil {
		s.log.Error("telemetry spool: cannot write a dead-letter file; the rows stay in the spool", "err", err)
		return nil, refusal
	}
	spoolDeadLetter.Add(len(dead))
	s.log.Error("telemetry spool: the history store keeps refusing rows while it takes others; they are moved to a dead-letter file and their lane goes on",
		"file", path, "rows", len(dead), "shard", l.shard, "record", seq, "err", refusal)
	return dead, nil
}

// isolate delivers rows[lo:hi], which the sink refused together, in two
// halves, looks into each refused one the same way, and adds to dead the
// rows it refuses alone. It gives up with the sink's error when the sink is
// unavailable, or refuses both halves while it has taken nothing since the
// record's last refusal (deliverApart).
func (s *Spool) isolate(l *lane, rows []storage.Row, repeat []bool, vers []uint64, lo, hi int, dead *[]int) error {
	if hi-lo == 1 {
		*dead = append(*dead, lo)
		return nil
	}
	mid := lo + (hi-lo)/2
	var errs [2]error
	for i, p := range [2][2]int{{lo, mid}, {mid, hi}} {
		err := s.sink.WriteHistory(context.Background(), rows[p[0]:p[1]], repeat[p[0]:p[1]], vers[p[0]:p[1]])
		if errors.Is(err, storage.ErrUnavailable) {
			return err
		}
		if err == nil {
			s.taken.Add(1)
		}
		errs[i] = err
	}
	if errs[0] != nil && errs[1] != nil && s.taken.Load() == l.stuckTaken {
		return errs[0]
	}
	if errs[0] != nil {
		if err := s.isolate(l, rows, repeat, vers, lo, mid, dead); err != nil {
			return err
		}
	}
	if errs[1] != nil {
		return s.isolate(l, rows, repeat, vers, mid, hi, dead)
	}
	return nil
}

// deadLetter writes rows[i] for each i in dead to a new dead-letter file in
// the spool's folder, synced, its name too, and returns its path. The file is
// a segment in the log's format, each row a record with the lane and sequence
// number of the record it came from and its own version, so a replay reads it
// as the log (scanSegment, decodeVersioned). It is written whole under a
// temporary name, synced, and only then given its name, which it never
// shares with another file (writeDeadLetterFile): a listing or a replay while
// it is written never sees it, complete or not.
func (s *Spool) deadLetter(lane byte, seq uint64, rows []storage.Row, vers []uint64, dead []int) (string, error) {
	var enc recordEncoder
	var buf []byte
	for _, i := range dead {
		start := len(buf)
		buf = enc.append(append(buf, make([]byte, recHeaderLen)...), rows, []int32{int32(i)}, vers[i])
		putHeader(buf[start:], lane, seq, crc32.Checksum(buf[start+recHeaderLen:], castagnoli))
	}
	s.deadMu.Lock()
	defer s.deadMu.Unlock()
	return writeDeadLetterFile(s.cfg.Dir, buf)
}

// FlushEntity delivers what the spool took for the entity's lane before the
// call, or returns the sink's error: a delete that rewrites latest values from
// history must see the points this node acknowledged. Rows the lane takes
// meanwhile need not be delivered, so a busy lane does not hold it up for long.
func (s *Spool) FlushEntity(ctx context.Context, id uuid.UUID) error {
	l := s.lanes[s.shardOf(id)]
	return s.flushLane(ctx, l, l.last.Load())
}

// Flush delivers everything spooled so far, or returns the sink's error. A
// pending record not yet resolved goes with every row as a possible repeat.
func (s *Spool) Flush(ctx context.Context) error {
	for _, l := range s.lanes {
		if err := s.flushLane(ctx, l, math.MaxUint64); err != nil {
			return err
		}
	}
	return nil
}

// flushLane delivers the lane's records numbered below upTo, or all it has.
func (s *Spool) flushLane(ctx context.Context, l *lane, upTo uint64) error {
	for l.rows.Load() > 0 {
		l.deliverMu.Lock()
		done := l.done >= upTo
		l.deliverMu.Unlock()
		if done {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		n, _, err := s.deliverOnce(l, true)
		if err != nil {
			return err
		}
		if n == 0 {
			// Rows appended whose sync has not finished yet; after a failed
			// sync they never will in this process (the next start recovers
			// what reached the disk), and waiting for them would spin forever.
			if err := s.Failed(); err != nil {
				return err
			}
			time.Sleep(time.Millisecond)
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
		s.syncMu.Lock() // no sync in flight on a file about to close
		s.wmu.Lock()
		s.closed = true
		s.wmu.Unlock()
		s.syncMu.Unlock()
		err = s.closeFiles()
	})
	return err
}

func (s *Spool) closeFiles() error {
	var errs []error
	s.segMu.Lock()
	for _, seg := range s.segs {
		errs = append(errs, seg.f.Close())
	}
	s.segMu.Unlock()
	if s.done != nil {
		errs = append(errs, s.done.f.Close())
	}
	errs = append(errs, s.lock.Close()) // last: the folder is free once its files are closed
	return errors.Join(errs...)
}
