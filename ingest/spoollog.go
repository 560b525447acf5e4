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
// sync; recovery reads each segment up to its first record that does not check
// out and ignores the rest, which no acknowledged write can be in (every
// acknowledged record's bytes, and all before them, were synced).
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

// scanSegment reads a segment written by an earlier process and calls fn for
// every record up to the first one that does not check out (a torn tail), and
// returns the length of the records that do.
func scanSegment(f *os.File, fn func(h recHeader, payload []byte) error) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	var off int64
	var buf []byte
	hdr := make([]byte, recHeaderLen)
	for {
		if _, err := f.ReadAt(hdr, off); err != nil {
			if errors.Is(err, io.EOF) {
				return off, nil
			}
			return off, err
		}
		h, err := parseHeader(hdr)
		if err != nil || off+recHeaderLen+int64(h.n) > st.Size() {
			return off, nil
		}
		if cap(buf) < h.n {
			buf = make([]byte, h.n)
		}
		p := buf[:h.n]
		if _, err := f.ReadAt(p, off+recHeaderLen); err != nil {
			if errors.Is(err, io.EOF) {
				return off, nil
			}
			return off, err
		}
		if crc32.Checksum(p, castagnoli) != h.crc {
			return off, nil
		}
		if err := fn(h, p); err != nil {
			return off, err
		}
		off += recHeaderLen + int64(h.n)
	}
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
