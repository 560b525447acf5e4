package ingest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// The spool's log is a folder of segment files written front to back and
// deleted whole, as in VictoriaMetrics' persistent queue and NATS's file store:
// a spooled record is written once, read once and forgotten with its segment,
// where an LSM (the spool was a Pebble store before) also flushed, compressed,
// compacted and decompressed every record that waited more than a memtable's
// worth during a ClickHouse backlog (a quarter of a node's CPU, bench/RESULTS.md).
//
// A segment is a sequence of records:
//
//	payload length u32 | lane u8 | seq u64 | payload CRC-32C u32 | header CRC-32C u32 | payload
//
// The payload is a spool record (spoolcodec.go) of one lane. Appends are
// group-committed with fsync; a record is readable, and its write acknowledged,
// only once a sync covered it. A crash can leave a torn tail after the last
// sync, which no acknowledged write can be in (every acknowledged record's
// bytes, and all before them, were synced): only the newest segment can have
// one, and recovery cuts it off. Anything else that does not check out is
// damage: recovery reports it and passes over it (Spool.recover).
const (
	recHeaderLen = 4 + 1 + 8 + 4 + 4
	segSuffix    = ".seg"
	// cursorsFile holds each lane's delivered position (see lane.done).
	cursorsFile = "delivered"
	// shardsFile holds the number of lanes the records are written for, in
	// decimal (Spool.shardCount).
	shardsFile = "shards"
)

// maxShards bounds the lanes: a record's header has one byte for its lane.
const maxShards = 256

// segmentBytes is where a segment ends and the next starts: about a second of a
// node's spool writes at full load, so delivered data leaves the disk soon
// after. A variable for tests.
var segmentBytes int64 = 64 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segment is one file of the log.
type segment struct {
	id   uint64
	f    *os.File
	size int64 // bytes written; guarded by Spool.wmu for the segment being written
	// base is where the segment starts in the log's bytes: the sizes of the
	// segments before it since the process started (Spool.Full measures what a
	// lane keeps with it).
	base int64

	// durable is how many bytes a sync has covered: readers read below it.
	// sealed is set, after durable's final value, when nothing more will be
	// written to the segment.
	durable atomic.Int64
	sealed  atomic.Bool
	// holes are the damaged bytes that recovery found before records that
	// check out; readers pass over them. Set before any reader runs.
	holes []span
}

// pastHole returns where the damage that off lies in ends, if it does.
func (seg *segment) pastHole(off int64) (int64, bool) {
	for _, h := range seg.holes {
		if off >= h.from && off < h.to {
			return h.to, true
		}
	}
	return 0, false
}

// maxRecordPayload bounds a record's payload well below the 4 GiB its header's
// length can say; a write splits a lane's rows over more records past it. A
// variable for tests.
var maxRecordPayload = 1 << 30

func segName(id uint64) string { return fmt.Sprintf("%016x%s", id, segSuffix) }

// putHeader fills the header before payload p, which starts at b[recHeaderLen:].
func putHeader(b []byte, lane byte, seq uint64, payloadCRC uint32) {
	binary.LittleEndian.PutUint32(b[0:], uint32(len(b)-recHeaderLen))
	b[4] = lane
	binary.LittleEndian.PutUint64(b[5:], seq)
	binary.LittleEndian.PutUint32(b[13:], payloadCRC)
	binary.LittleEndian.PutUint32(b[17:], crc32.Checksum(b[:17], castagnoli))
}

// recHeader is a decoded record header.
type recHeader struct {
	n    int // payload length
	lane byte
	seq  uint64
	crc  uint32
}

var errTorn = errors.New("torn or corrupt spool record")

func parseHeader(b []byte) (recHeader, error) {
	if crc32.Checksum(b[:17], castagnoli) != binary.LittleEndian.Uint32(b[17:]) {
		return recHeader{}, errTorn
	}
	return recHeader{
		n:    int(binary.LittleEndian.Uint32(b[0:])),
		lane: b[4],
		seq:  binary.LittleEndian.Uint64(b[5:]),
		crc:  binary.LittleEndian.Uint32(b[13:]),
	}, nil
}

// listSegments returns the ids of the segment files in dir, oldest first.
func listSegments(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), segSuffix)
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(name, 16, 64)
		if err != nil {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// span is the bytes [from, to) of a segment.
type span struct{ from, to int64 }

func (sp span) String() string { return fmt.Sprintf("%d-%d", sp.from, sp.to) }

// segScan is what scanSegment found in a segment.
type segScan struct {
	end   int64  // the end of the last record that checks out (0: none)
	size  int64  // the file's size: bytes from end on are a torn tail or damage
	holes []span // bytes that do not check out, with records that do after them
	next  uint64 // one past the last record's sequence number, or minSeq
}

// scanSegment reads a segment written by an earlier process and calls fn for
// every record that checks out, in order. Bytes that do not check out but are
// followed by a record that does are damage (a flipped bit, a lost block): it
// passes over them to that record (nextRecord) and returns them as holes, so
// that only the damaged records are lost. Records follow one another in
// sequence, so one found after damage is numbered from minSeq on: one past the
// last record of the segments before.
func scanSegment(f *os.File, minSeq uint64, fn func(h recHeader, payload []byte) error) (segScan, error) {
	st, err := f.Stat()
	if err != nil {
		return segScan{}, err
	}
	// Read whole: at most a segment (64 MiB) or one write larger than that,
	// and a search past damage needs the rest of the file anyway.
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return segScan{}, err
	}
	sc := segScan{size: int64(len(b)), next: minSeq}
	for off := 0; off < len(b); {
		h, ok := recordAt(b, off)
		if !ok {
			at := nextRecord(b[off:], sc.next)
			if at < 0 {
				break // a torn tail, or damage up to the end: the caller tells which
			}
			sc.holes = append(sc.holes, span{int64(off), int64(off + at)})
			off += at
			continue
		}
		if err := fn(h, b[off+recHeaderLen:off+recHeaderLen+h.n]); err != nil {
			return sc, err
		}
		sc.next = max(sc.next, h.seq+1)
		off += recHeaderLen + h.n
		sc.end = int64(off)
	}
	return sc, nil
}

// recordAt returns the header of the record at b[off:] if a whole record that
// checks out starts there.
func recordAt(b []byte, off int) (recHeader, bool) {
	if len(b)-off < recHeaderLen {
		return recHeader{}, false
	}
	h, err := parseHeader(b[off : off+recHeaderLen])
	if err != nil || h.n > len(b)-off-recHeaderLen {
		return recHeader{}, false
	}
	p := b[off+recHeaderLen : off+recHeaderLen+h.n]
	return h, crc32.Checksum(p, castagnoli) == h.crc
}

// nextRecord is the offset in b of the first record that checks out, with a
// sequence number from minSeq on, or -1. The lower bound keeps out an older
// record that a failed write left and a later one did not overwrite. Random
// bytes pass the header's checksum rarely, so the payload's is seldom computed.
func nextRecord(b []byte, minSeq uint64) int {
	for off := 0; off+recHeaderLen <= len(b); off++ {
		if h, ok := recordAt(b, off); ok && h.seq >= minSeq {
			return off
		}
	}
	return -1
}

// readShards returns the lane count recorded in dir, or 0 if none is.
func readShards(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, shardsFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 1 || n > maxShards {
		return 0, fmt.Errorf("%s holds %q, not a shard count", shardsFile, b)
	}
	return n, nil
}

// writeShards records the lane count in dir durably, before any record is
// written for it: written aside, synced and renamed over the old one.
func writeShards(dir string, n int) error {
	tmp := filepath.Join(dir, shardsFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.Itoa(n) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	if err := os.Rename(tmp, filepath.Join(dir, shardsFile)); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a file created or removed in dir survive a power cut.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// position is a place in the log: a segment and an offset in it.
type position struct {
	seg uint64
	off int64
}

// reader reads one lane's way through the log; it is used under the lane's
// deliverMu. Its buffer holds file bytes [off, off+len(buf)) of segment seg.
type reader struct {
	seg *segment
	off int64
	buf []byte
}

const readChunk = 1 << 20

// record returns the record at pos and the position after it, or ok false when
// nothing durable is left. It moves to the next segment at a sealed segment's
// end. The payload is valid until the next call.
func (s *Spool) record(r *reader, pos position) (h recHeader, payload []byte, at, next position, ok bool, err error) {
	for {
		// The segment the read-ahead buffer is on, most of the time: no lookup
		// in the segment list per record.
		seg := r.seg
		if seg == nil || seg.id != pos.seg {
			seg = s.segmentAt(pos.seg)
		}
		if seg == nil {
			return h, nil, pos, pos, false, fmt.Errorf("telemetry spool: segment %s is gone", segName(pos.seg))
		}
		if to, ok := seg.pastHole(pos.off); ok {
			pos.off = to // damage recovery reported: the next record that checks out
		}
		sealed := seg.sealed.Load()
		durable := seg.durable.Load()
		if pos.off >= durable {
			if !sealed {
				return h, nil, pos, pos, false, nil
			}
			nxt := s.segmentAfter(pos.seg)
			if nxt == nil {
				return h, nil, pos, pos, false, nil
			}
			pos = position{seg: nxt.id}
			continue
		}
		b, err := r.bytes(seg, pos.off, recHeaderLen, durable)
		if err != nil {
			return h, nil, pos, pos, false, err
		}
		if h, err = parseHeader(b); err == nil && pos.off+recHeaderLen+int64(h.n) > durable {
			err = errTorn
		}
		if err == nil {
			if payload, err = r.bytes(seg, pos.off+recHeaderLen, h.n, durable); err == nil && crc32.Checksum(payload, castagnoli) != h.crc {
				err = errTorn
			}
		}
		if err != nil {
			return h, nil, pos, pos, false, fmt.Errorf("telemetry spool: segment %s at %d: %w", segName(seg.id), pos.off, err)
		}
		return h, payload, pos, position{seg.id, pos.off + recHeaderLen + int64(h.n)}, true, nil
	}
}

// bytes returns n bytes of seg at off, reading ahead up to limit.
func (r *reader) bytes(seg *segment, off int64, n int, limit int64) ([]byte, error) {
	if r.seg == seg && off >= r.off && off+int64(n) <= r.off+int64(len(r.buf)) {
		return r.buf[off-r.off : off-r.off+int64(n)], nil
	}
	want := int(min(limit-off, int64(max(n, readChunk))))
	if want < n {
		return nil, errTorn
	}
	if cap(r.buf) < want {
		r.buf = make([]byte, want)
	}
	r.seg, r.off, r.buf = seg, off, r.buf[:want]
	if _, err := seg.f.ReadAt(r.buf, off); err != nil {
		r.seg = nil
		return nil, err
	}
	return r.buf[:n], nil
}

// storeMax raises v to x.
func storeMax(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if cur >= x || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// cursors persists each lane's delivered position: 16 bytes per lane, the
// sequence number below which its records are delivered and its complement (a
// slot that does not check out reads as 0: everything is delivered again, which
// the sink tolerates). It is written without a sync after each delivery: a crash
// of the process keeps it (the page cache), a power cut may lose the last few,
// which repeats their deliveries.
type cursors struct {
	f *os.File
}

func openCursors(dir string) (*cursors, error) {
	f, err := os.OpenFile(filepath.Join(dir, cursorsFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &cursors{f: f}, nil
}

func (c *cursors) load(lane byte) uint64 {
	var b [16]byte
	if _, err := c.f.ReadAt(b[:], int64(lane)*16); err != nil {
		return 0
	}
	v := binary.LittleEndian.Uint64(b[:])
	if ^v != binary.LittleEndian.Uint64(b[8:]) {
		return 0
	}
	return v
}

func (c *cursors) store(lane byte, done uint64) error {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], done)
	binary.LittleEndian.PutUint64(b[8:], ^done)
	_, err := c.f.WriteAt(b[:], int64(lane)*16)
	return err
}
