package ingest

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/pebblelog"
	"github.com/sluice-iot/sluice/internal/version"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// memSink records deliveries and their repeat flags; while down it fails every
// write.
type memSink struct {
	mu     sync.Mutex
	rows   []storage.Row
	repeat []bool
	vers   []uint64
	down   bool
	writes int
	got    chan struct{}
}

func newMemSink() *memSink { return &memSink{got: make(chan struct{}, 1000)} }

func (m *memSink) WriteHistory(_ context.Context, rows []storage.Row, mayRepeat []bool, vers []uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	if m.down {
		return errors.New("sink down")
	}
	if len(mayRepeat) != len(rows) || len(vers) != len(rows) {
		panic("a delivery without a flag and a version per row")
	}
	m.rows = append(m.rows, rows...)
	m.repeat = append(m.repeat, mayRepeat...)
	m.vers = append(m.vers, vers...)
	select {
	case m.got <- struct{}{}:
	default:
	}
	return nil
}

func (m *memSink) setDown(d bool) { m.mu.Lock(); m.down = d; m.mu.Unlock() }

// flush forgets what the sink holds, delivers everything s holds, and returns
// the repeat flags per device: one t or f per row, in delivery order.
func (m *memSink) flush(t *testing.T, s *Spool) map[uuid.UUID]string {
	t.Helper()
	m.mu.Lock()
	m.rows, m.repeat, m.vers = nil, nil, nil
	m.mu.Unlock()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[uuid.UUID]string{}
	for i, r := range m.rows {
		out[r.EntityID] += map[bool]string{true: "t", false: "f"}[m.repeat[i]]
	}
	return out
}

func (m *memSink) count() int { m.mu.Lock(); defer m.mu.Unlock(); return len(m.rows) }

// waitRows waits until the sink holds n rows (each delivery signals got).
func (m *memSink) waitRows(t *testing.T, n int) {
	t.Helper()
	for m.count() < n {
		select {
		case <-m.got:
		case <-time.After(30 * time.Second):
			t.Fatalf("sink has %d rows, want %d", m.count(), n)
		}
	}
}

// waitDrained polls until the spool is empty (it forgets a batch just after the
// sink has it).
func waitDrained(t *testing.T, s *Spool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for rows, _ := s.Depth(); rows > 0; rows, _ = s.Depth() {
		if time.Now().After(deadline) {
			t.Fatalf("spool still holds %d rows", rows)
		}
		time.Sleep(time.Millisecond)
	}
}

func testRows(entity uuid.UUID, from, n int) []storage.Row {
	rows := make([]storage.Row, n)
	for i := range rows {
		rows[i] = storage.Row{TenantID: uuid.New(), EntityID: entity,
			Entry: kv.Entry{Ts: int64(from + i), Key: "k", Value: kv.LongValue(int64(from + i))}}
	}
	return rows
}

func TestSpoolRecordRoundTrip(t *testing.T) {
	id := uuid.New()
	rows := []storage.Row{
		{TenantID: uuid.New(), EntityID: id, Entry: kv.Entry{Ts: -5, Key: "b", Value: kv.BoolValue(true)}},
		{EntityID: id, Entry: kv.Entry{Ts: math.MaxInt64, Key: "long", Value: kv.LongValue(math.MinInt64)}},
		{EntityID: id, Entry: kv.Entry{Ts: 0, Key: "", Value: kv.DoubleValue(-0.5)}},
		{EntityID: id, Entry: kv.Entry{Ts: 7, Key: "héllo", Value: kv.StringValue("wörld\x00")}},
		{EntityID: id, Entry: kv.Entry{Ts: 8, Key: "j", Value: kv.JSONValue(`{"a":[1]}`)}},
	}
	rec := appendRecord(nil, rows)
	got, err := decodeRecord(nil, rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(rows) {
		t.Fatalf("round trip:\n%v\n%v", got, rows)
	}
	for cut := range len(rec) {
		if _, err := decodeRecord(nil, rec[:cut], nil); err == nil {
			t.Fatalf("truncated record of %d bytes decoded", cut)
		}
	}
	// With a name table, the same rows; a name seen before is the same string.
	var rd recordReader
	got, err = decodeRecord(nil, rec, &rd)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(rows) {
		t.Fatalf("with names: %v, %v", got, err)
	}
	again, _ := decodeRecord(nil, rec, &rd)
	if unsafe.StringData(again[0].Key) != unsafe.StringData(got[0].Key) {
		t.Fatal("a key name seen before was copied again")
	}
}

// TestSpoolRecordSeries: rows of a series seen before in the record name it by
// number, and a row whose tenant differs from its series' first row keeps its
// own tenant; past 127 series the numbers take two bytes.
func TestSpoolRecordSeries(t *testing.T) {
	rows := fleetRows(200, 3) // 800 series, each seen 3 times
	other := uuid.New()
	rows = append(rows, rows[0], rows[5])
	rows[len(rows)-1].TenantID = other // a literal row
	rows = append(rows, rows[5])       // and its series again, with its first tenant
	rec := appendRecord(nil, rows)
	var rd recordReader
	for range 2 { // the reader's series table is reused, not carried over
		got, err := decodeRecord(nil, rec, &rd)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(rows) {
			t.Fatalf("round trip: %v\n%v\n%v", err, got, rows)
		}
	}
	if len(rd.series) != 0 || cap(rd.series) < 800 {
		t.Fatalf("series table len %d cap %d after a record of 800 series", len(rd.series), cap(rd.series))
	}
	// The compactness the format is for: a batch100 cell's commit of 25
	// requests takes about 12 bytes a row (version 1: 54).
	batch := fleetRows(1, 2500)
	if n := len(appendRecord(nil, batch)); n > 13*len(batch) {
		t.Fatalf("%d bytes for %d rows: %.1f a row", n, len(batch), float64(n)/float64(len(batch)))
	}
	// A reference to a series the record has not defined is corrupt.
	bad := []byte{recordVersion, 1, byte(kv.Long), 0, 0, 2}
	if _, err := decodeRecord(nil, bad, &rd); !errors.Is(err, errBadRecord) {
		t.Fatalf("undefined series: %v", err)
	}
	// So is a head with both series flags.
	bad = []byte{recordVersion, 1, byte(kv.Long) | headNew | headLiteral}
	if _, err := decodeRecord(nil, bad, nil); !errors.Is(err, errBadRecord) {
		t.Fatalf("both flags: %v", err)
	}
}

// TestSpoolRecordV1: records of the first format, which a spool written by an
// earlier version holds after an upgrade, still decode. The encoder below is
// that version's, checked against bytes it wrote.
func TestSpoolRecordV1(t *testing.T) {
	tenant := uuid.MustParse("00000000-0000-0000-0000-00000000000a")
	entity := uuid.MustParse("00000000-0000-0000-0000-00000000000b")
	one := []storage.Row{{TenantID: tenant, EntityID: entity, Entry: kv.Entry{Ts: 3, Key: "t", Value: kv.LongValue(-1)}}}
	want := "0101" + "0000000000000000000000000000000a" + "0000000000000000000000000000000b" + "06" + "0174" + "02" + "01"
	if got := hex.EncodeToString(appendRecordV1(nil, one)); got != want {
		t.Fatalf("version 1 encoder wrote %s, want %s", got, want)
	}
	rows := fleetRows(3, 5)
	rows = append(rows, storage.Row{TenantID: tenant, EntityID: entity, Entry: kv.Entry{Ts: -9, Key: "s", Value: kv.StringValue("x")}},
		storage.Row{TenantID: tenant, EntityID: entity, Entry: kv.Entry{Ts: 9, Key: "j", Value: kv.JSONValue(`{}`)}})
	rec := appendRecordV1(nil, rows)
	var rd recordReader
	got, err := decodeRecord(nil, rec, &rd)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(rows) {
		t.Fatalf("version 1: %v\n%v\n%v", err, got, rows)
	}
	if n, err := recordRows(rec); n != len(rows) || err != nil {
		t.Fatalf("recordRows = %d, %v", n, err)
	}
}

// appendRecordV1 is the encoder of version 1 records, kept to test decoding them.
func appendRecordV1(dst []byte, rows []storage.Row) []byte {
	dst = append(dst, recordV1)
	dst = binary.AppendUvarint(dst, uint64(len(rows)))
	for i := range rows {
		r := &rows[i]
		dst = append(dst, r.TenantID[:]...)
		dst = append(dst, r.EntityID[:]...)
		dst = binary.AppendVarint(dst, r.Ts)
		dst = binary.AppendUvarint(dst, uint64(len(r.Key)))
		dst = append(dst, r.Key...)
		dst = append(dst, byte(r.Value.Type))
		dst = appendValue(dst, &r.Value)
	}
	return dst
}

// TestSpoolRecordV2: records of version 2, which have no base version, decode
// with the same rows and version 0 (the sink takes one at delivery); version 3
// carries the base it was given. A version 2 record is a version 3 one without
// the base, checked against bytes version 2 wrote.
func TestSpoolRecordV2(t *testing.T) {
	tenant := uuid.MustParse("00000000-0000-0000-0000-00000000000a")
	entity := uuid.MustParse("00000000-0000-0000-0000-00000000000b")
	one := []storage.Row{{TenantID: tenant, EntityID: entity, Entry: kv.Entry{Ts: 3, Key: "t", Value: kv.LongValue(-1)}}}
	v2 := "0201" + "0a" + "0000000000000000000000000000000a" + "0000000000000000000000000000000b" + "0174" + "06" + "01"
	var e recordEncoder
	v3 := hex.EncodeToString(e.append(nil, one, nil, 300))
	if want := "0301" + "ac02" + v2[4:]; v3 != want {
		t.Fatalf("version 3 record %s, want %s", v3, want)
	}
	rows := fleetRows(3, 5)
	for _, c := range []struct {
		rec []byte
		ver uint64
	}{
		{mustHex(t, v2), 0},
		{e.append(nil, rows, nil, 0), 0},
		{e.append(nil, rows, nil, 1<<62), 1 << 62},
	} {
		var rd recordReader
		got, ver, err := decodeVersioned(nil, c.rec, &rd)
		if err != nil || ver != c.ver {
			t.Fatalf("%x: version %d, %v; want %d", c.rec, ver, err, c.ver)
		}
		if n, err := recordRows(c.rec); n != len(got) || err != nil {
			t.Fatalf("recordRows = %d, %v", n, err)
		}
	}
	got, _, _ := decodeVersioned(nil, mustHex(t, v2), nil)
	if fmt.Sprint(got) != fmt.Sprint(one) {
		t.Fatalf("version 2: %v, want %v", got, one)
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSpoolVersions: a row's version is taken when the spool takes it, not when
// it is delivered, and stays the same across a restart; rows of one device rise
// in the order written.
func TestSpoolVersions(t *testing.T) {
	dir := t.TempDir()
	sink := newMemSink()
	sink.setDown(true)
	s, err := OpenSpool(SpoolConfig{Dir: dir, Shards: 2, FlushInterval: time.Hour}, sink)
	if err != nil {
		t.Fatal(err)
	}
	before := version.Reserve(1)
	id := uuid.New()
	for i := range 3 {
		if err := s.Write(context.Background(), testRows(id, i*4, 4)); err != nil {
			t.Fatal(err)
		}
	}
	after := version.Reserve(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	s.Close(ctx)
	cancel()

	sink.setDown(false)
	s, err = OpenSpool(SpoolConfig{Dir: dir, Shards: 2, FlushInterval: time.Hour}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.vers) != 12 {
		t.Fatalf("%d versions delivered, want 12", len(sink.vers))
	}
	for i, v := range sink.vers {
		if v <= before || v >= after {
			t.Fatalf("row %d: version %d not taken between %d and %d, when it was written", i, v, before, after)
		}
		if i > 0 && v <= sink.vers[i-1] {
			t.Fatalf("row %d: version %d after %d", i, v, sink.vers[i-1])
		}
	}
}

// TestNameTableBounded: past maxNames distinct names the table starts over
// instead of growing, and still returns equal strings.
func TestNameTableBounded(t *testing.T) {
	var names nameTable
	for i := range maxNames + 10 {
		b := []byte(fmt.Sprintf("key-%d", i))
		if got := names.intern(b); got != string(b) {
			t.Fatalf("intern(%q) = %q", b, got)
		}
	}
	if len(names.m) != 10 {
		t.Fatalf("%d names held after %d distinct, want the 10 since the table started over", len(names.m), maxNames+10)
	}
}

// FuzzSpoolRecord: a spool record read back from disk never panics the decoder,
// and what decodes re-encodes to the same rows, with or without a name table.
func FuzzSpoolRecord(f *testing.F) {
	id := uuid.MustParse("0190aa5e-0000-7000-8000-000000000001")
	f.Add(appendRecord(nil, []storage.Row{
		{EntityID: id, Entry: kv.Entry{Ts: 1, Key: "t", Value: kv.DoubleValue(21.5)}},
		{EntityID: id, Entry: kv.Entry{Ts: 2, Key: "t", Value: kv.StringValue("x")}},
	}))
	f.Add(appendRecord(nil, fleetRows(3, 4)))
	f.Add(appendRecordV1(nil, fleetRows(2, 2)))
	f.Add([]byte{recordVersion, 0})
	f.Add([]byte{recordV1, 0})
	f.Fuzz(func(t *testing.T, rec []byte) {
		var rd recordReader
		plain, err := decodeRecord(nil, rec, nil)
		interned, ierr := decodeRecord(nil, rec, &rd)
		if (err == nil) != (ierr == nil) {
			t.Fatalf("errors differ: %v and %v", err, ierr)
		}
		if err != nil {
			return
		}
		if fmt.Sprint(plain) != fmt.Sprint(interned) {
			t.Fatalf("rows differ:\n%v\n%v", plain, interned)
		}
		back, err := decodeRecord(nil, appendRecord(nil, plain), nil)
		if err != nil || fmt.Sprint(back) != fmt.Sprint(plain) {
			t.Fatalf("re-encoded: %v, %v", back, err)
		}
	})
}

func TestSpoolDeliversInBatches(t *testing.T) {
	sink := newMemSink()
	s, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), BatchRows: 100, FlushInterval: time.Hour}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	id := uuid.New()
	for i := range 10 {
		if err := s.Write(context.Background(), testRows(id, i*10, 10)); err != nil {
			t.Fatal(err)
		}
	}
	// 100 rows reached BatchRows: delivered without waiting for the (hour-long) tick.
	sink.waitRows(t, 100)
	waitDrained(t, s)
	if rows, bytes := s.Depth(); rows != 0 || bytes != 0 {
		t.Fatalf("depth after delivery: %d rows %d bytes", rows, bytes)
	}
}

func TestSpoolFlushInterval(t *testing.T) {
	sink := newMemSink()
	s, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), FlushInterval: 10 * time.Millisecond}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	s.Write(context.Background(), testRows(uuid.New(), 0, 3))
	sink.waitRows(t, 3) // far below BatchRows: the interval delivers them
}

// TestSpoolOutageAndRestart keeps rows while the sink is down, refuses writes past
// MaxBytes, survives a restart, and drains everything exactly once when the sink returns.
func TestSpoolOutageAndRestart(t *testing.T) {
	dir := t.TempDir()
	sink := newMemSink()
	sink.setDown(true)
	s, err := OpenSpool(SpoolConfig{Dir: dir, MaxBytes: 4096, FlushInterval: 5 * time.Millisecond}, sink)
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	written := 0
	for {
		err := s.Write(context.Background(), testRows(id, written, 10))
		if errors.Is(err, ErrSpoolFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		written += 10
	}
	if written == 0 {
		t.Fatal("nothing fit in the spool")
	}
	// Close while the sink is down: the rows stay on disk.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	s.Close(ctx)
	cancel()

	sink.setDown(false)
	s, err = OpenSpool(SpoolConfig{Dir: dir, MaxBytes: 4096, FlushInterval: 5 * time.Millisecond}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	sink.waitRows(t, written)
	seen := map[int64]int{}
	for _, r := range sink.rows {
		seen[r.Ts]++
	}
	for ts := range int64(written) {
		if seen[ts] != 1 {
			t.Fatalf("ts %d delivered %d times", ts, seen[ts])
		}
	}
	// Space is free again once the spool has forgotten what it delivered.
	waitDrained(t, s)
	if err := s.Write(context.Background(), testRows(id, written, 10)); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkSpoolWrite100(b *testing.B) {
	s, err := OpenSpool(SpoolConfig{Dir: b.TempDir()}, newMemSink())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	rows := fleetRows(1, 25)
	b.ReportAllocs()
	b.SetBytes(int64(len(appendRecord(nil, rows))))
	for b.Loop() {
		if err := s.Write(context.Background(), rows); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSpoolShardsKeepDeviceOrder writes batches mixing many devices and checks
// that every device's rows reach the sink in the order they were written, with
// several shards delivering in parallel.
func TestSpoolShardsKeepDeviceOrder(t *testing.T) {
	sink := newMemSink()
	s, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), Shards: 4, BatchRows: 50, FlushInterval: 5 * time.Millisecond}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	devices := make([]uuid.UUID, 16)
	for i := range devices {
		devices[i] = uuid.New()
	}
	const batches = 40
	for b := range batches {
		var rows []storage.Row
		for _, d := range devices {
			rows = append(rows, storage.Row{EntityID: d, Entry: kv.Entry{Ts: 7, Key: "k", Value: kv.LongValue(int64(b))}})
		}
		if err := s.Write(context.Background(), rows); err != nil {
			t.Fatal(err)
		}
	}
	sink.waitRows(t, batches*len(devices))
	last := map[uuid.UUID]int64{}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, r := range sink.rows {
		if prev, ok := last[r.EntityID]; ok && r.Value.Long != prev+1 {
			t.Fatalf("device %s: write %d delivered after %d", r.EntityID, r.Value.Long, prev)
		}
		last[r.EntityID] = r.Value.Long
	}
	if len(last) != len(devices) {
		t.Fatalf("%d devices delivered", len(last))
	}
}

// TestSpoolRepeatFlags: a delivery flags the rows of the devices the writer
// resolved as repeats and no others; after a failed delivery the next one flags all
// of its rows (the sink may have taken part of the failed one), and so does the
// delivery of records a previous process left (it may have delivered them just
// before it stopped).
func TestSpoolRepeatFlags(t *testing.T) {
	dir := t.TempDir()
	sink := newMemSink()
	cfg := SpoolConfig{Dir: dir, FlushInterval: time.Hour, Shards: 2}
	s, err := OpenSpool(cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	a, b := uuid.New(), uuid.New()
	ctx := context.Background()
	// flags delivers what is spooled and returns the flags per device, as
	// "device:flags" with one t/f per row in delivery order.
	flags := func() string {
		t.Helper()
		per := sink.flush(t, s)
		return "a:" + per[a] + " b:" + per[b]
	}
	write := func(repeats ...uuid.UUID) {
		t.Helper()
		rows := append(testRows(a, 0, 2), testRows(b, 0, 2)...)
		p, err := s.WritePending(ctx, rows)
		if err != nil {
			t.Fatal(err)
		}
		s.Resolve(p, repeats, false)
	}
	write()
	if got := flags(); got != "a:ff b:ff" {
		t.Fatalf("new points: %s", got)
	}
	write(b)
	write()
	if got := flags(); got != "a:ffff b:ttff" {
		t.Fatalf("b repeats in the first write: %s, want b's first two rows flagged", got)
	}
	if got := flags(); got != "a: b:" {
		t.Fatalf("nothing left: %s", got)
	}
	write()
	sink.setDown(true)
	if err := s.Flush(ctx); err == nil {
		t.Fatal("Flush with the sink down succeeded")
	}
	sink.setDown(false)
	// Flush stopped at the first lane that failed: its rows go again, flagged.
	want := "a:tt b:tt"
	if sa, sb := s.shardOf(a), s.shardOf(b); sa < sb {
		want = "a:tt b:ff"
	} else if sb < sa {
		want = "a:ff b:tt"
	}
	if got := flags(); got != want {
		t.Fatalf("after a failed delivery: %s, want %s", got, want)
	}
	write()
	if got := flags(); got != "a:ff b:ff" {
		t.Fatalf("after a good delivery: %s", got)
	}
	// Records left by a previous process, then new ones.
	write()
	done, cancel := context.WithCancel(ctx)
	cancel() // Close leaves the records on disk for the next start
	s.Close(done)
	if s, err = OpenSpool(cfg, sink); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	write()
	if got := flags(); got != "a:ttff b:ttff" {
		t.Fatalf("replayed, then new: %s, want the replayed rows flagged", got)
	}
}

// TestSpoolPending: records of a WritePending wait for Resolve before they are
// delivered, then go with its verdict; Flush (Close's last delivery) sends an
// unresolved one with every row as a possible repeat.
func TestSpoolPending(t *testing.T) {
	sink := newMemSink()
	s, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), FlushInterval: 5 * time.Millisecond, Shards: 1}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	a, b := uuid.New(), uuid.New()
	rows := append(testRows(a, 0, 2), testRows(b, 0, 2)...)
	flags := func(from int) string {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		out := ""
		for _, f := range sink.repeat[from:] {
			out += map[bool]string{true: "t", false: "f"}[f]
		}
		return out
	}

	p, err := s.WritePending(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // ten flush intervals
	if n := sink.count(); n != 0 {
		t.Fatalf("%d rows delivered before Resolve", n)
	}
	s.Resolve(p, []uuid.UUID{b}, false)
	sink.waitRows(t, 4)
	if got := flags(0); got != "fftt" {
		t.Fatalf("resolved with b repeating: %s, want fftt", got)
	}

	p, err = s.WritePending(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	s.Resolve(p, nil, true)
	sink.waitRows(t, 8)
	if got := flags(4); got != "tttt" {
		t.Fatalf("resolved as all: %s, want tttt", got)
	}

	if _, err := s.WritePending(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := flags(8); got != "tttt" {
		t.Fatalf("flushed unresolved: %s, want tttt", got)
	}
	s.lanes[0].pendMu.Lock()
	n := len(s.lanes[0].pending)
	s.lanes[0].pendMu.Unlock()
	if n != 0 {
		t.Fatalf("%d verdicts kept after delivery", n)
	}

	// Past maxPending verdicts a record is not held: it goes as it says, every
	// row a possible repeat, without waiting for Resolve.
	defer func(m int) { maxPending = m }(maxPending)
	maxPending = 1
	held, err := s.WritePending(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WritePending(ctx, rows); err != nil { // one over the bound
		t.Fatal(err)
	}
	s.Resolve(held, nil, false)
	sink.waitRows(t, 20)
	if got := flags(12); got != "fffftttt" {
		t.Fatalf("resolved, then one past the bound: %s, want fffftttt", got)
	}
}

// segments lists the segment files in dir.
func segments(t *testing.T, dir string) []uint64 {
	t.Helper()
	ids, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestSpoolTornTail: a crash in the middle of an append leaves a partial record
// at the end of the log; the next start delivers every record before it, cuts
// it off the file, and writes on. The start after, which finds that segment
// no longer the newest, sees no damage in it.
func TestSpoolTornTail(t *testing.T) {
	dir := t.TempDir()
	sink := newMemSink()
	id := uuid.New()
	cfg, s := leftUndelivered(t, dir, sink, id, 5)
	ids := segments(t, dir)
	path := filepath.Join(dir, segName(ids[len(ids)-1]))
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Half of a sixth record, as a crash before its sync may leave it.
	sixth := appendRecord(make([]byte, recHeaderLen), testRows(id, 50, 10))
	putHeader(sixth, byte(s.shardOf(id)), 99, crc32.Checksum(sixth[recHeaderLen:], castagnoli))
	if err := os.WriteFile(path, append(whole, sixth[:len(sixth)/2]...), 0o644); err != nil {
		t.Fatal(err)
	}

	s, err = OpenSpool(cfg, sink) // the sink still down: the segment stays
	if err != nil {
		t.Fatal(err)
	}
	if rows, _ := s.Depth(); rows != 50 {
		t.Fatalf("recovered %d rows, want 50", rows)
	}
	if _, err := os.Stat(path + ".damaged"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a torn tail was kept as damage: %v", err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != int64(len(whole)) {
		t.Fatalf("the torn tail was not cut off: %v", err)
	}
	if err := s.Write(context.Background(), testRows(id, 60, 10)); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	s.Close(done)

	// The segment is no longer the newest: its end is not taken for damage.
	before := spoolDamaged.Get()
	var logs strings.Builder
	s = reopenLogged(t, cfg, sink, &logs)
	if rows, _ := s.Depth(); rows != 60 {
		t.Fatalf("recovered %d rows, want 60", rows)
	}
	if _, err := os.Stat(path + ".damaged"); !errors.Is(err, os.ErrNotExist) || spoolDamaged.Get() != before ||
		strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("a cut-off torn tail was taken for damage at the next start (%v):\n%s", err, logs.String())
	}
	sink.waitRows(t, 60)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for i, r := range sink.rows {
		want := int64(i)
		if i >= 50 {
			want = int64(i + 10) // 50-59 were the torn record's
		}
		if r.Ts != want {
			t.Fatalf("row %d has ts %d, want %d", i, r.Ts, want)
		}
	}
}

// leftUndelivered writes n records of id's rows (10 each) into a spool in dir
// whose sink is down, and closes it: they stay for the next start, which gets
// the sink back up. It returns the spool's config and the closed spool.
func leftUndelivered(t *testing.T, dir string, sink *memSink, id uuid.UUID, n int) (SpoolConfig, *Spool) {
	t.Helper()
	sink.setDown(true)
	cfg := SpoolConfig{Dir: dir, FlushInterval: 5 * time.Millisecond}
	s, err := OpenSpool(cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := s.Write(context.Background(), testRows(id, i*10, 10)); err != nil {
			t.Fatal(err)
		}
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	s.Close(done) // the sink is down: everything stays
	return cfg, s
}

// recordOffsets returns where each record that checks out starts in the
// segment file at path.
func recordOffsets(t *testing.T, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for off := 0; off < len(b); {
		h, ok := recordAt(b, off)
		if !ok {
			break
		}
		offs = append(offs, int64(off))
		off += recHeaderLen + h.n
	}
	return offs
}

// damage applies fn to the bytes of the segment file at path.
func damage(t *testing.T, path string, fn func(b []byte)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fn(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// reopenLogged opens the spool of cfg with the sink up, logging into logs.
func reopenLogged(t *testing.T, cfg SpoolConfig, sink *memSink, logs *strings.Builder) *Spool {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	sink.setDown(false)
	s, err := OpenSpool(cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// deliveredTs returns the ts of the rows the sink holds, in order.
func (m *memSink) deliveredTs() []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	ts := make([]int64, len(m.rows))
	for i, r := range m.rows {
		ts[i] = r.Ts
	}
	return ts
}

// wantTs returns the ts of leftUndelivered's n records (10 rows each) but
// those of the records in lost.
func wantTs(n int, lost ...int) []int64 {
	var ts []int64
	for rec := range n {
		if !slices.Contains(lost, rec) {
			for i := range 10 {
				ts = append(ts, int64(rec*10+i))
			}
		}
	}
	return ts
}

// TestSpoolDamagedSegment: a record that does not check out with records
// that do after it is damage, not a cut-off write: the start keeps a copy of
// the segment, says so and counts it, and delivers every record but the
// damaged one, those after it included. A torn tail (TestSpoolTornTail) keeps
// no copy.
func TestSpoolDamagedSegment(t *testing.T) {
	dir := t.TempDir()
	sink := newMemSink()
	id := uuid.New()
	cfg, _ := leftUndelivered(t, dir, sink, id, 100)
	ids := segments(t, dir)
	path := filepath.Join(dir, segName(ids[len(ids)-1]))
	offs := recordOffsets(t, path)
	if len(offs) != 100 {
		t.Fatalf("%d records, want 100", len(offs))
	}
	damage(t, path, func(b []byte) {
		b[offs[50]+recHeaderLen+3] ^= 0x40 // a flipped bit in the 51st record's payload
	})

	before := spoolDamaged.Get()
	var logs strings.Builder
	s := reopenLogged(t, cfg, sink, &logs)
	if rows, _ := s.Depth(); rows != 990 {
		t.Fatalf("%d rows to deliver, want all 990 but the damaged record's", rows)
	}
	sink.waitRows(t, 990)
	if got, want := sink.deliveredTs(), wantTs(100, 50); !slices.Equal(got, want) {
		t.Fatalf("delivered ts %v, want %v", got, want)
	}
	if _, err := os.Stat(path + ".damaged"); err != nil {
		t.Fatalf("no copy of the damaged segment: %v", err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "damaged") {
		t.Fatalf("the start did not say the segment is damaged:\n%s", logs.String())
	}
	if n := spoolDamaged.Get() - before; n != 1 {
		t.Fatalf("%d damaged segments counted, want 1", n)
	}
}

// TestSpoolDamagedSealedTail: bytes that do not check out at the end of a
// segment other than the newest are damage, even with no record after them in
// it: that segment was whole and synced when the next one started. The start
// reports it as damage (ERROR, count, copy) and delivers everything else, the
// later segments included.
func TestSpoolDamagedSealedTail(t *testing.T) {
	defer func(n int64) { segmentBytes = n }(segmentBytes)
	segmentBytes = 8 << 10
	dir := t.TempDir()
	sink := newMemSink()
	id := uuid.New()
	cfg, _ := leftUndelivered(t, dir, sink, id, 100)
	ids := segments(t, dir)
	if len(ids) < 2 {
		t.Fatalf("%d segments, want a rotation", len(ids))
	}
	path := filepath.Join(dir, segName(ids[0]))
	offs := recordOffsets(t, path)
	zeroFrom := offs[len(offs)-3] + 5 // the last three records of the first segment
	damage(t, path, func(b []byte) { clear(b[zeroFrom:]) })

	before := spoolDamaged.Get()
	var logs strings.Builder
	s := reopenLogged(t, cfg, sink, &logs)
	n := len(offs)
	lost := []int{n - 3, n - 2, n - 1}
	want := wantTs(100, lost...)
	if rows, _ := s.Depth(); rows != int64(len(want)) {
		t.Fatalf("%d rows to deliver, want %d", rows, len(want))
	}
	sink.waitRows(t, len(want))
	if got := sink.deliveredTs(); !slices.Equal(got, want) {
		t.Fatalf("delivered ts %v, want %v", got, want)
	}
	if _, err := os.Stat(path + ".damaged"); err != nil {
		t.Fatalf("no copy of the damaged segment: %v", err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("the start did not say the segment is damaged:\n%s", logs.String())
	}
	if n := spoolDamaged.Get() - before; n != 1 {
		t.Fatalf("%d damaged segments counted, want 1", n)
	}
}

// TestSpoolSegments: the log moves to a new segment past segmentBytes, and a
// segment's file goes once every lane is past it, lanes with nothing to deliver
// included; a restart after deliveries delivers nothing again.
func TestSpoolSegments(t *testing.T) {
	defer func(n int64) { segmentBytes = n }(segmentBytes)
	segmentBytes = 4096
	dir := t.TempDir()
	sink := newMemSink()
	cfg := SpoolConfig{Dir: dir, FlushInterval: 5 * time.Millisecond, Shards: 4}
	s, err := OpenSpool(cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.New() // one device: one lane writes, three only pass over
	sink.setDown(true)
	for i := range 100 {
		if err := s.Write(context.Background(), testRows(id, i*10, 10)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(segments(t, dir)); n < 10 {
		t.Fatalf("%d segments for about 40 KiB in 4 KiB segments", n)
	}
	sink.setDown(false)
	sink.waitRows(t, 1000)
	deadline := time.Now().Add(10 * time.Second)
	for len(segments(t, dir)) > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("segments left after delivery: %v", segments(t, dir))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err = OpenSpool(cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if rows, _ := s.Depth(); rows != 0 {
		t.Fatalf("%d rows to deliver again after a restart", rows)
	}
	// Sequence numbers go on from where they were, even with the log empty:
	// new records are not taken for delivered ones.
	if err := s.Write(context.Background(), testRows(id, 1000, 10)); err != nil {
		t.Fatal(err)
	}
	sink.waitRows(t, 1010)
	s.Close(context.Background())
}

// writePebbleSpool writes a spool as an earlier version kept it in Pebble in
// dir: a record per write, keyed by its lane (of 2) and its sequence number.
func writePebbleSpool(t *testing.T, dir string, writes ...[]storage.Row) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebblelog.Logger{L: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	for seq, rows := range writes {
		shard := byte(binary.BigEndian.Uint64(rows[0].EntityID[8:]) % 2)
		key := binary.BigEndian.AppendUint64([]byte{shard}, uint64(seq))
		if err := db.Set(key, appendRecord(nil, rows), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSpoolFromPebble: a spool an earlier version kept in Pebble is delivered
// by this one, in order per device, and Pebble's files are gone.
func TestSpoolFromPebble(t *testing.T) {
	dir := t.TempDir()
	a, b := uuid.New(), uuid.New()
	writePebbleSpool(t, dir, testRows(a, 0, 3), testRows(b, 0, 2), testRows(a, 3, 3))
	sink := newMemSink()
	s, err := OpenSpool(SpoolConfig{Dir: dir, FlushInterval: time.Hour, Shards: 2}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	got := sink.flush(t, s)
	if len(got[a]) != 6 || len(got[b]) != 2 {
		t.Fatalf("delivered per device: %v", got)
	}
	if err := s.Write(context.Background(), testRows(a, 6, 1)); err != nil {
		t.Fatal(err)
	}
	if got := sink.flush(t, s); got[a] != "t" {
		t.Fatalf("after the move: %v", got)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !spoolFile(e.Name()) && e.Name() != lockFile {
			t.Errorf("left in the spool folder: %s", e.Name())
		}
	}
}

// FuzzSpoolSegment: recovery reads any file as a segment without panicking or
// allocating past the file, and takes only records that check out.
func FuzzSpoolSegment(f *testing.F) {
	rec := appendRecord(make([]byte, recHeaderLen), testRows(uuid.New(), 0, 3))
	putHeader(rec, 0, 7, crc32.Checksum(rec[recHeaderLen:], castagnoli))
	f.Add(rec)
	f.Add(append(append([]byte{}, rec...), rec[:10]...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "seg")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		file, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer file.Close()
		var sum int64
		sc, err := scanSegment(file, 0, func(h recHeader, payload []byte) error {
			if crc32.Checksum(payload, castagnoli) != h.crc {
				t.Fatal("a record whose checksum fails was taken")
			}
			sum += recHeaderLen + int64(len(payload))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var holes, at int64
		for _, h := range sc.holes {
			if h.from < at || h.to <= h.from {
				t.Fatalf("holes %v out of order", sc.holes)
			}
			holes += h.to - h.from
			at = h.to
		}
		if sc.end != sum+holes || sc.end > sc.size || sc.size != int64(len(data)) || at > sc.end {
			t.Fatalf("end %d, records %d, holes %v, size %d, file %d", sc.end, sum, sc.holes, sc.size, len(data))
		}
	})
}

// TestSpoolConcurrent: writers on many goroutines, segments rotating under them,
// lanes delivering at the same time through a sink that fails now and then, and a
// restart in the middle: every row reaches the sink once, each device's in order.
func TestSpoolConcurrent(t *testing.T) {
	defer func(n int64) { segmentBytes = n }(segmentBytes)
	segmentBytes = 8 << 10
	dir := t.TempDir()
	sink := &flakySink{memSink: newMemSink()}
	sink.fail.Store(true)
	cfg := SpoolConfig{Dir: dir, Shards: 3, BatchRows: 64, FlushInterval: 2 * time.Millisecond}
	const writers, writes = 8, 60
	devices := make([][]uuid.UUID, writers)
	for w := range devices {
		devices[w] = []uuid.UUID{uuid.New(), uuid.New()}
	}
	run := func(from, to int) {
		s, err := OpenSpool(cfg, sink)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := from; i < to; i++ {
					// Two devices per write, so records of one write go to different lanes.
					rows := append(testRows(devices[w][0], i*3, 3), testRows(devices[w][1], i*3, 3)...)
					var err error
					if i%2 == 0 {
						err = s.Write(context.Background(), rows)
					} else {
						var p Pending
						if p, err = s.WritePending(context.Background(), rows); err == nil {
							s.Resolve(p, nil, false)
						}
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		// Close with a short bound: what is not delivered stays for the next start.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	run(0, writes/2)
	run(writes/2, writes)
	s, err := OpenSpool(cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	sink.fail.Store(false)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	next := map[uuid.UUID]int64{}
	for _, r := range sink.rows {
		if r.Ts != next[r.EntityID] {
			t.Fatalf("device %s: ts %d delivered, want %d", r.EntityID, r.Ts, next[r.EntityID])
		}
		next[r.EntityID]++
	}
	for _, ds := range devices {
		for _, d := range ds {
			if next[d] != writes*3 {
				t.Fatalf("device %s: %d rows delivered, want %d", d, next[d], writes*3)
			}
		}
	}
	// Lanes with nothing left move to the log's end at their next tick, and
	// every segment but the one being written goes.
	for deadline := time.Now().Add(10 * time.Second); len(segments(t, dir)) > 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("segments left after everything was delivered: %v", segments(t, dir))
		}
	}
}

// flakySink fails every third delivery while fail is set.
type flakySink struct {
	*memSink
	fail  atomic.Bool
	calls atomic.Int64
}

func (f *flakySink) WriteHistory(ctx context.Context, rows []storage.Row, mayRepeat []bool, vers []uint64) error {
	if f.calls.Add(1)%3 == 0 && f.fail.Load() {
		// A dropped connection: a server error refusing the same record
		// alone three times in a row would send rows to a dead letter.
		return fmt.Errorf("%w: flaky", storage.ErrUnavailable)
	}
	return f.memSink.WriteHistory(ctx, rows, mayRepeat, vers)
}

// TestSpoolInterleavedWrite: one write whose devices' rows interleave (a group
// commit of several requests) reaches the sink whole, each device's rows in order.
func TestSpoolInterleavedWrite(t *testing.T) {
	sink := newMemSink()
	s, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), Shards: 3, FlushInterval: time.Hour}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	devices := []uuid.UUID{uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()}
	var rows []storage.Row
	for i := range 200 {
		d := devices[(i*7+i/3)%len(devices)]
		rows = append(rows, storage.Row{EntityID: d, Entry: kv.Entry{Ts: int64(i), Key: "k", Value: kv.LongValue(1)}})
	}
	if err := s.Write(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	sink.flush(t, s)
	want := map[uuid.UUID][]int64{}
	for _, r := range rows {
		want[r.EntityID] = append(want[r.EntityID], r.Ts)
	}
	got := map[uuid.UUID][]int64{}
	sink.mu.Lock()
	for _, r := range sink.rows {
		got[r.EntityID] = append(got[r.EntityID], r.Ts)
	}
	sink.mu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delivered per device:\n%v\nwant\n%v", got, want)
	}
}

// TestSpoolFromPebbleCutShort: a move out of Pebble killed after Pebble's
// markers went keeps segment 1 on the next start (it used to delete it and copy
// the store again, by then emptied of its data files) and removes the rest of
// Pebble's files.
func TestSpoolFromPebbleCutShort(t *testing.T) {
	dir := t.TempDir()
	a := uuid.New()
	writePebbleSpool(t, dir, testRows(a, 0, 5))
	// The move's steps up to the cut: the copy, then the markers, then (in
	// name order) some of the data files.
	if _, err := copyPebbleToSegment(dir, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if err := removeFiles(dir, func(name string) bool {
		return strings.HasPrefix(name, "marker.") || strings.HasSuffix(name, ".log") || strings.HasSuffix(name, ".sst")
	}); err != nil {
		t.Fatal(err)
	}
	sink := newMemSink()
	s, err := OpenSpool(SpoolConfig{Dir: dir, FlushInterval: time.Hour, Shards: 2}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if got := sink.flush(t, s); len(got[a]) != 5 {
		t.Fatalf("delivered: %v, want the 5 rows", got)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !spoolFile(e.Name()) && e.Name() != lockFile {
			t.Errorf("left in the spool folder: %s", e.Name())
		}
	}
}

// TestSpoolSplitsLargeRecords: a lane's rows past maxRecordPayload go in more
// records, which a restart reads back whole and in order.
func TestSpoolSplitsLargeRecords(t *testing.T) {
	defer func(v int) { maxRecordPayload = v }(maxRecordPayload)
	maxRecordPayload = 300
	dir := t.TempDir()
	a := uuid.New()
	open := func(sink *memSink) *Spool {
		s, err := OpenSpool(SpoolConfig{Dir: dir, FlushInterval: time.Hour, Shards: 2}, sink)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	down := newMemSink()
	down.setDown(true)
	s := open(down)
	before := s.seq
	if err := s.Write(context.Background(), testRows(a, 0, 200)); err != nil {
		t.Fatal(err)
	}
	if n := s.seq - before; n < 4 {
		t.Fatalf("200 rows in %d records of at most %d bytes", n, maxRecordPayload)
	}
	s.Close(context.Background()) // the sink is down: an error, and the rows stay
	sink := newMemSink()
	s = open(sink)
	defer s.Close(context.Background())
	sink.flush(t, s)
	if len(sink.rows) != 200 {
		t.Fatalf("%d rows delivered, want 200", len(sink.rows))
	}
	for i, r := range sink.rows {
		if r.Ts != int64(i) {
			t.Fatalf("row %d has ts %d", i, r.Ts)
		}
	}
}

// refusingSink refuses every delivery holding a row of one device as
// unavailable, as a cluster whose shard for that device is unreachable, and
// delivers the rest. (A row refused for itself goes to a dead letter:
// spool_deadletter_test.go.)
type refusingSink struct {
	*memSink
	refuse uuid.UUID
}

func (r *refusingSink) WriteHistory(ctx context.Context, rows []storage.Row, mayRepeat []bool, vers []uint64) error {
	r.mu.Lock()
	refuse := r.refuse
	r.mu.Unlock()
	for _, row := range rows {
		if row.EntityID == refuse {
			return fmt.Errorf("%w: shard unreachable", storage.ErrUnavailable)
		}
	}
	return r.memSink.WriteHistory(ctx, rows, mayRepeat, vers)
}

// deviceOnLane returns a new device id that s maps to lane k.
func deviceOnLane(s *Spool, k int) uuid.UUID {
	for {
		if id := uuid.New(); s.shardOf(id) == k {
			return id
		}
	}
}

// TestSpoolMaxBytesBoundsDisk: a lane that cannot deliver keeps the log from its
// position on, other lanes' delivered records included, so MaxBytes counts
// those too: the folder stays within it and a segment more, and writes get
// ErrSpoolFull instead of filling the disk while only a few rows wait.
func TestSpoolMaxBytesBoundsDisk(t *testing.T) {
	defer func(v int64) { segmentBytes = v }(segmentBytes)
	segmentBytes = 4 << 10
	const maxBytes = 32 << 10
	dir := t.TempDir()
	sink := &refusingSink{memSink: newMemSink()}
	s, err := OpenSpool(SpoolConfig{Dir: dir, Shards: 2, MaxBytes: maxBytes, FlushInterval: time.Millisecond}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	stuck, flowing := deviceOnLane(s, 0), deviceOnLane(s, 1)
	sink.refuse = stuck
	if err := s.Write(context.Background(), testRows(stuck, 0, 1)); err != nil {
		t.Fatal(err)
	}
	written := 0
	for {
		err := s.Write(context.Background(), testRows(flowing, written, 10))
		if errors.Is(err, ErrSpoolFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		written += 10
		if written > 100000 {
			t.Fatal("the spool never filled while one lane kept every segment")
		}
		// The flowing lane keeps up, so its rows never count for much.
		sink.waitRows(t, written)
	}
	if rows, bytes := s.Depth(); rows != 1 || bytes >= maxBytes {
		t.Fatalf("depth %d rows, %d bytes: only the stuck row should wait", rows, bytes)
	}
	var disk int64
	for _, id := range segments(t, dir) {
		st, err := os.Stat(filepath.Join(dir, segName(id)))
		if err != nil {
			t.Fatal(err)
		}
		disk += st.Size()
	}
	if disk > maxBytes+segmentBytes {
		t.Fatalf("the log holds %d bytes, more than MaxBytes %d and one segment", disk, maxBytes)
	}

	// Once the stuck lane delivers, space is free again.
	sink.mu.Lock()
	sink.refuse = uuid.Nil
	sink.mu.Unlock()
	waitDrained(t, s)
	if err := s.Write(context.Background(), testRows(flowing, written, 10)); err != nil {
		t.Fatal(err)
	}
}

// TestSpoolMaxBytesPerWrite: the limit counts the write's own bytes, checked
// under the append lock: a write that would pass MaxBytes is refused (and
// leaves the spool as it was) though the spool is not Full yet, while an
// empty spool takes a write larger than the limit, which could never get in
// otherwise.
func TestSpoolMaxBytesPerWrite(t *testing.T) {
	const maxBytes = 4096
	sink := newMemSink()
	sink.setDown(true)
	s, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), MaxBytes: maxBytes, FlushInterval: time.Hour}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	id := uuid.New()
	if err := s.Write(context.Background(), testRows(id, 0, 10)); err != nil {
		t.Fatal(err)
	}
	rows, bytes := s.Depth()
	if s.Full() {
		t.Fatal("full after 10 rows")
	}
	if err := s.Write(context.Background(), testRows(id, 10, 1000)); !errors.Is(err, ErrSpoolFull) {
		t.Fatalf("a write past MaxBytes: %v, want ErrSpoolFull", err)
	}
	if r, b := s.Depth(); r != rows || b != bytes {
		t.Fatalf("depth %d rows %d bytes after a refused write, was %d, %d", r, b, rows, bytes)
	}
	if end := s.end.Load(); end > maxBytes {
		t.Fatalf("the log grew to %d bytes past MaxBytes %d", end, maxBytes)
	}

	// Empty: the large write gets in, and then the spool is full.
	sink.setDown(false)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink.setDown(true)
	if err := s.Write(context.Background(), testRows(id, 10, 1000)); err != nil {
		t.Fatalf("a write larger than MaxBytes to an empty spool: %v", err)
	}
	if err := s.Write(context.Background(), testRows(id, 1010, 1)); !errors.Is(err, ErrSpoolFull) {
		t.Fatalf("a write after the large one: %v, want ErrSpoolFull", err)
	}
}

// TestSpoolIdleLaneNotFull: a lane that had nothing to deliver while the log
// grew, and then gets a row, does not count the other lanes' records before it.
func TestSpoolIdleLaneNotFull(t *testing.T) {
	const maxBytes = 8 << 10
	sink := newMemSink()
	s, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), Shards: 2, MaxBytes: maxBytes, FlushInterval: time.Hour}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	idle, busy := deviceOnLane(s, 0), deviceOnLane(s, 1)
	for i := 0; i < 4*maxBytes/100; i++ {
		if err := s.Write(context.Background(), testRows(busy, i*10, 10)); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Write(context.Background(), testRows(idle, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if s.Full() {
		t.Fatal("full with one row waiting")
	}
}

// TestSpoolKeepsShardCount: a spool restarted with another SLUICE_SPOOL_SHARDS
// while it holds undelivered records keeps the count they were written with, so a
// device's new rows queue behind its old ones in one lane, fewer shards included
// (which used to refuse to start); the new count applies at a start that finds
// the spool delivered.
func TestSpoolKeepsShardCount(t *testing.T) {
	dir := t.TempDir()
	sink := newMemSink()
	sink.setDown(true)
	open := func(shards int) *Spool {
		t.Helper()
		s, err := OpenSpool(SpoolConfig{Dir: dir, Shards: shards, FlushInterval: time.Millisecond}, sink)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open(4)
	devices := make([]uuid.UUID, 16)
	for i := range devices {
		devices[i] = uuid.New()
		if err := s.Write(context.Background(), testRows(devices[i], 0, 5)); err != nil {
			t.Fatal(err)
		}
	}
	closeNow := func(s *Spool) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		s.Close(ctx)
	}
	closeNow(s)

	for _, shards := range []int{8, 1} {
		s = open(shards)
		if len(s.lanes) != 4 {
			t.Fatalf("opened with %d shards over a backlog written with 4: %d lanes", shards, len(s.lanes))
		}
		closeNow(s)
	}

	s = open(2)
	sink.setDown(false)
	for _, d := range devices {
		if err := s.Write(context.Background(), testRows(d, 5, 5)); err != nil {
			t.Fatal(err)
		}
	}
	sink.waitRows(t, 10*len(devices))
	waitDrained(t, s)
	sink.mu.Lock()
	last := map[uuid.UUID]int64{}
	for _, r := range sink.rows {
		if prev, ok := last[r.EntityID]; ok && r.Ts != prev+1 {
			sink.mu.Unlock()
			t.Fatalf("device %s: ts %d delivered after %d", r.EntityID, r.Ts, prev)
		}
		last[r.EntityID] = r.Ts
	}
	sink.mu.Unlock()
	s.Close(context.Background())

	s = open(2) // delivered: the configured count applies
	defer s.Close(context.Background())
	if len(s.lanes) != 2 {
		t.Fatalf("an empty spool opened with %d lanes, want 2", len(s.lanes))
	}
}

// TestSpoolFlushEntity: FlushEntity delivers what the spool holds for the
// entity's lane, records a previous process left included, and leaves the other
// lanes alone.
func TestSpoolFlushEntity(t *testing.T) {
	dir := t.TempDir()
	sink := newMemSink()
	sink.setDown(true)
	s, err := OpenSpool(SpoolConfig{Dir: dir, Shards: 2, FlushInterval: time.Hour}, sink)
	if err != nil {
		t.Fatal(err)
	}
	a, b := deviceOnLane(s, 0), deviceOnLane(s, 1)
	for _, id := range []uuid.UUID{a, b} {
		if err := s.Write(context.Background(), testRows(id, 0, 3)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	s.Close(ctx)
	cancel()

	sink.setDown(false)
	s, err = OpenSpool(SpoolConfig{Dir: dir, Shards: 2, FlushInterval: time.Hour}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if err := s.Write(context.Background(), testRows(a, 3, 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.FlushEntity(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	got := map[uuid.UUID]int{}
	sink.mu.Lock()
	for _, r := range sink.rows {
		got[r.EntityID]++
	}
	sink.mu.Unlock()
	if got[a] != 5 || got[b] != 0 {
		t.Fatalf("delivered %d rows of the flushed device (want 5) and %d of the other (want 0)", got[a], got[b])
	}
}

// capSink refuses every delivery of more than max rows, as ClickHouse refuses
// an insert past its memory limit.
type capSink struct {
	*memSink
	max int
}

func (c *capSink) WriteHistory(ctx context.Context, rows []storage.Row, mayRepeat []bool, vers []uint64) error {
	if len(rows) > c.max {
		return errors.New("memory limit exceeded")
	}
	return c.memSink.WriteHistory(ctx, rows, mayRepeat, vers)
}

// TestSpoolShrinksRefusedDeliveries: a lane whose deliveries the sink refuses
// for their size delivers in smaller parts, down to a record, instead of
// retrying the same batch for good; every row arrives once, in order.
func TestSpoolShrinksRefusedDeliveries(t *testing.T) {
	sink := &capSink{memSink: newMemSink(), max: 25}
	s, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), BatchRows: 1000, FlushInterval: time.Millisecond}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	id := uuid.New()
	for i := range 8 {
		if err := s.Write(context.Background(), testRows(id, i*10, 10)); err != nil {
			t.Fatal(err)
		}
	}
	sink.waitRows(t, 80)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for i, r := range sink.rows {
		if r.Ts != int64(i) {
			t.Fatalf("row %d has ts %d: delivered out of order or twice", i, r.Ts)
		}
	}
}

// TestSpoolLocksItsFolder: a second spool on a folder in use is refused; two
// would deliver and delete each other's segments, acknowledged rows included.
func TestSpoolLocksItsFolder(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSpool(SpoolConfig{Dir: dir, FlushInterval: time.Hour}, newMemSink())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSpool(SpoolConfig{Dir: dir, FlushInterval: time.Hour}, newMemSink()); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("a second spool on the folder: %v", err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err = OpenSpool(SpoolConfig{Dir: dir, FlushInterval: time.Hour}, newMemSink())
	if err != nil {
		t.Fatalf("reopened after Close: %v", err)
	}
	s.Close(context.Background())
}

// ackLostSink takes the first delivery's rows but answers an error, as when
// ClickHouse committed an insert whose answer was lost; then it behaves.
type ackLostSink struct {
	*memSink
	failedOnce bool
}

func (a *ackLostSink) WriteHistory(ctx context.Context, rows []storage.Row, mayRepeat []bool, vers []uint64) error {
	err := a.memSink.WriteHistory(ctx, rows, mayRepeat, vers)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil && !a.failedOnce {
		a.failedOnce = true
		return errors.New("connection reset after the commit")
	}
	return err
}

// TestSpoolRepeatsAfterLostAnswer: every row of a delivery that failed goes
// again as a possible repeat, however many smaller deliveries resend them.
// Before, only the first (halved) one was flagged, and reports read the
// duplicates of the rest on days not marked as holding repeats.
func TestSpoolRepeatsAfterLostAnswer(t *testing.T) {
	sink := &ackLostSink{memSink: newMemSink()}
	s, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), BatchRows: 100, FlushInterval: time.Hour, Shards: 1}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	for range 4 {
		p, err := s.WritePending(ctx, testRows(uuid.New(), 0, 25))
		if err != nil {
			t.Fatal(err)
		}
		s.Resolve(p, nil, false) // the latest store: all new points
	}
	// The lane's drainer may make the first delivery before Flush does.
	for tries := 1; s.Flush(ctx) != nil; tries++ {
		if tries == 5 {
			t.Fatal("the deliveries keep failing")
		}
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if !sink.failedOnce {
		t.Fatal("no delivery failed")
	}
	seen := map[string]int{}
	for i, r := range sink.rows {
		k := r.EntityID.String() + "/" + fmt.Sprint(r.Ts)
		if seen[k]++; seen[k] > 1 && !sink.repeat[i] {
			t.Fatalf("row %s delivered again as a new point", k)
		}
	}
	if len(seen) != 100 || len(sink.rows) != 200 {
		t.Fatalf("%d rows delivered, %d distinct; want each of 100 twice", len(sink.rows), len(seen))
	}
}

// TestSpoolRowVersions: WritePendingAt gives each row the version RowVersions
// says, lanes and all, so the latest store can compare them with a delete's.
func TestSpoolRowVersions(t *testing.T) {
	sink := newMemSink()
	s, err := OpenSpool(SpoolConfig{Dir: t.TempDir(), Shards: 4, FlushInterval: time.Hour}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	var rows []storage.Row
	for d := range 6 {
		rows = append(rows, testRows(uuid.New(), d*100, 5)...)
	}
	const base = 1_000_000
	want := map[string]uint64{}
	for i, v := range s.RowVersions(rows, base) {
		want[rows[i].EntityID.String()+fmt.Sprint(rows[i].Ts)] = v
	}
	p, err := s.WritePendingAt(context.Background(), rows, base)
	if err != nil {
		t.Fatal(err)
	}
	s.Resolve(p, nil, true)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.rows) != len(rows) {
		t.Fatalf("%d rows delivered, want %d", len(sink.rows), len(rows))
	}
	seen := map[uint64]bool{}
	for i, r := range sink.rows {
		k := r.EntityID.String() + fmt.Sprint(r.Ts)
		if sink.vers[i] != want[k] || seen[sink.vers[i]] || sink.vers[i] < base || sink.vers[i] >= base+uint64(len(rows)) {
			t.Fatalf("row %s delivered with version %d, RowVersions said %d", k, sink.vers[i], want[k])
		}
		seen[sink.vers[i]] = true
	}
}
