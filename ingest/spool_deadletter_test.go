package ingest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// poisonSink refuses, as a server error and not unavailability, every
// delivery that holds a row of key "poison", as ClickHouse a value it can
// never store, or every delivery while all is set; it takes the rest.
type poisonSink struct {
	*memSink
	all bool // under memSink.mu
}

func (p *poisonSink) WriteHistory(ctx context.Context, rows []storage.Row, mayRepeat []bool, vers []uint64) error {
	p.mu.Lock()
	all := p.all
	p.mu.Unlock()
	if all || slices.ContainsFunc(rows, func(r storage.Row) bool { return r.Key == "poison" }) {
		return errors.New("code: 27, message: cannot parse input")
	}
	return p.memSink.WriteHistory(ctx, rows, mayRepeat, vers)
}

func (p *poisonSink) refuseAll(all bool) { p.mu.Lock(); p.all = all; p.mu.Unlock() }

// openIdle opens a spool whose drainers stay idle (the test delivers with
// deliverOnce, attempt by attempt, so the attempts are counted exactly).
func openIdle(t *testing.T, dir string, shards int, sink Sink) *Spool {
	t.Helper()
	s, err := OpenSpool(SpoolConfig{Dir: dir, Shards: shards, BatchRows: 1000, FlushInterval: time.Hour}, sink)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// attempt runs n deliveries of lane l, failed or not.
func attempt(s *Spool, l *lane, n int) {
	for range n {
		s.deliverOnce(l, false)
	}
}

// deadLetters returns the rows of the dead-letter files in dir, checking
// that they are records of lane with sequence number seq.
func deadLetters(t *testing.T, dir string, lane byte, seq uint64) []storage.Row {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, deadLetterPrefix+"*"+segSuffix))
	if err != nil {
		t.Fatal(err)
	}
	var rows []storage.Row
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := scanSegment(f, 0, func(h recHeader, payload []byte) error {
			if h.lane != lane || h.seq != seq {
				t.Fatalf("dead letter of lane %d record %d, want lane %d record %d", h.lane, h.seq, lane, seq)
			}
			var ver uint64
			var rd recordReader
			rows, ver, err = decodeVersioned(rows, payload, &rd)
			if err != nil || ver == 0 {
				t.Fatalf("dead letter record: version %d, %v", ver, err)
			}
			return nil
		})
		f.Close()
		if err != nil || len(sc.holes) > 0 || sc.end != sc.size {
			t.Fatalf("dead-letter file %s: %+v, %v", name, sc, err)
		}
	}
	return rows
}

// TestSpoolDeadLetter: a row the sink always refuses (not as unavailable)
// no longer holds up its lane: after refusedTries refusals of its record
// alone the record goes in parts, the rows the sink takes are delivered, and
// the one it refuses alone goes to a dead-letter file in the log's format,
// counted; the lane goes on with the records behind it, and a restart takes
// the dead letter for no segment.
func TestSpoolDeadLetter(t *testing.T) {
	dir := t.TempDir()
	sink := &poisonSink{memSink: newMemSink()}
	s := openIdle(t, dir, 1, sink)
	id := uuid.New()
	first := testRows(id, 0, 10)
	first[4].Key = "poison"
	if err := s.Write(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(context.Background(), testRows(id, 10, 10)); err != nil {
		t.Fatal(err)
	}
	l := s.lanes[0]
	seq := l.done // the first record's

	before := spoolDeadLetter.Get()
	for i := 0; l.rows.Load() > 0; i++ {
		if i == 100 {
			t.Fatalf("the lane still holds %d rows", l.rows.Load())
		}
		s.deliverOnce(l, false)
	}
	var want []int64
	for ts := range 20 {
		if ts != 4 {
			want = append(want, int64(ts))
		}
	}
	got := sink.deliveredTs()
	slices.Sort(got) // the parts of the refused record go out of order
	if !slices.Equal(got, want) {
		t.Fatalf("delivered ts %v, want %v", got, want)
	}
	if n := spoolDeadLetter.Get() - before; n != 1 {
		t.Fatalf("%d dead-letter rows counted, want 1", n)
	}
	dead := deadLetters(t, dir, 0, seq)
	if len(dead) != 1 || dead[0].Key != "poison" || dead[0].Ts != 4 || dead[0].EntityID != id {
		t.Fatalf("dead letters %+v, want the poison row", dead)
	}
	s.Close(context.Background())

	s = openIdle(t, dir, 1, sink)
	defer s.Close(context.Background())
	if rows, _ := s.Depth(); rows != 0 {
		t.Fatalf("the restart found %d rows to deliver", rows)
	}
}

// TestSpoolNoDeadLetterWhileAllRefused: a sink that refuses every delivery
// (a read-only or missing table) has every row look refused: nothing goes to
// a dead letter, however many times it refuses, and all is delivered once it
// takes rows again.
func TestSpoolNoDeadLetterWhileAllRefused(t *testing.T) {
	dir := t.TempDir()
	sink := &poisonSink{memSink: newMemSink(), all: true}
	s := openIdle(t, dir, 2, sink)
	defer s.Close(context.Background())
	many, one := deviceOnLane(s, 0), deviceOnLane(s, 1)
	if err := s.Write(context.Background(), testRows(many, 0, 10)); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(context.Background(), testRows(one, 0, 1)); err != nil {
		t.Fatal(err)
	}
	before := spoolDeadLetter.Get()
	for range 30 {
		attempt(s, s.lanes[0], 1)
		attempt(s, s.lanes[1], 1)
	}
	if rows, _ := s.Depth(); rows != 11 {
		t.Fatalf("%d rows left, want all 11", rows)
	}
	if n := spoolDeadLetter.Get() - before; n != 0 {
		t.Fatalf("%d rows sent to a dead letter while the sink refused everything", n)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, deadLetterPrefix+"*")); len(names) > 0 {
		t.Fatalf("dead-letter files %v", names)
	}
	sink.refuseAll(false)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := sink.count(); n != 11 {
		t.Fatalf("%d rows delivered, want 11", n)
	}
}

// TestSpoolDeadLetterOneRow: a record of one row the sink refuses has no
// parts to tell the row from the sink; another lane's delivery since its
// first refusal does.
func TestSpoolDeadLetterOneRow(t *testing.T) {
	dir := t.TempDir()
	sink := &poisonSink{memSink: newMemSink()}
	s := openIdle(t, dir, 2, sink)
	defer s.Close(context.Background())
	bad, good := deviceOnLane(s, 0), deviceOnLane(s, 1)
	poison := testRows(bad, 0, 1)
	poison[0].Key = "poison"
	if err := s.Write(context.Background(), poison); err != nil {
		t.Fatal(err)
	}
	l := s.lanes[0]
	seq := l.done
	attempt(s, l, refusedTries+2) // nothing else got in: it stays
	if l.rows.Load() != 1 {
		t.Fatal("a lone row was sent to a dead letter while the sink took nothing")
	}
	if err := s.Write(context.Background(), testRows(good, 0, 5)); err != nil {
		t.Fatal(err)
	}
	attempt(s, s.lanes[1], 1)
	attempt(s, l, 1)
	if l.rows.Load() != 0 {
		t.Fatal("the poison row still holds its lane while another lane delivers")
	}
	if dead := deadLetters(t, dir, 0, seq); len(dead) != 1 || dead[0].Key != "poison" {
		t.Fatalf("dead letters %+v, want the poison row", dead)
	}
	if n := sink.count(); n != 5 {
		t.Fatalf("%d rows delivered, want 5", n)
	}
}

// TestSpoolNoDeadLetterAfterOldDeliveries: deliveries the sink took before it
// began refusing everything do not make its refusals the rows' own: a record
// refused first for a bad row, then with everything else, keeps all its rows.
func TestSpoolNoDeadLetterAfterOldDeliveries(t *testing.T) {
	dir := t.TempDir()
	sink := &poisonSink{memSink: newMemSink()}
	s := openIdle(t, dir, 2, sink)
	defer s.Close(context.Background())
	bad, other := deviceOnLane(s, 0), deviceOnLane(s, 1)
	rows := testRows(bad, 0, 10)
	rows[3].Key = "poison"
	if err := s.Write(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	attempt(s, s.lanes[0], 1) // refused for its bad row
	if err := s.Write(context.Background(), testRows(other, 0, 1)); err != nil {
		t.Fatal(err)
	}
	attempt(s, s.lanes[1], 1) // the sink takes another lane's record
	sink.refuseAll(true)      // then nothing at all
	before := spoolDeadLetter.Get()
	attempt(s, s.lanes[0], 3*refusedTries)
	if n := spoolDeadLetter.Get() - before; n != 0 {
		t.Fatalf("%d rows sent to a dead letter while the sink refused everything", n)
	}
	if rows, _ := s.Depth(); rows != 10 {
		t.Fatalf("%d rows left, want all 10", rows)
	}
}

// TestSpoolDeadLetterTempLeftover: a dead-letter file a crash left
// unfinished (its temporary name) is neither listed nor replayed, and the
// spool's next start removes it; dead-letter files, replayed ones and the
// log are left alone. A file the spool writes leaves no temporary name.
func TestSpoolDeadLetterTempLeftover(t *testing.T) {
	dir := t.TempDir()
	s := openIdle(t, dir, 1, newMemSink())
	rows := testRows(uuid.New(), 0, 4)
	path, err := s.deadLetter(0, 1, rows, make([]uint64, len(rows)), []int{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	s.Close(context.Background())
	for _, name := range dirNames(t, dir) {
		if filepath.Ext(name) == tmpSuffix {
			t.Fatalf("%s left after a dead letter was written", name)
		}
	}
	replayed := path[:len(path)-len(".seg")] + "1.seg" + replayedSuffix
	if err := os.WriteFile(replayed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// What a crash leaves: part of a file, under its temporary name.
	whole, _ := os.ReadFile(path)
	leftover := path[:len(path)-len(".seg")] + "2.seg" + tmpSuffix
	if err := os.WriteFile(leftover, whole[:len(whole)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := ListDeadLetters(dir)
	if err != nil || len(files) != 1 || files[0].Path != path || files[0].Rows != 4 || files[0].Damaged != 0 {
		t.Fatalf("listed %+v, %v", files, err)
	}
	if _, err := ReplayDeadLetter(context.Background(), newMemSink(), leftover); err == nil {
		t.Fatal("an unfinished dead-letter file was replayed")
	}
	deadNames := func() []string {
		return slices.DeleteFunc(dirNames(t, dir), func(n string) bool { return !strings.HasPrefix(n, deadLetterPrefix) })
	}
	before := deadNames()

	s = openIdle(t, dir, 1, newMemSink())
	defer s.Close(context.Background())
	want := slices.DeleteFunc(before, func(n string) bool { return n == filepath.Base(leftover) })
	if after := deadNames(); len(want) != 2 || !slices.Equal(after, want) {
		t.Fatalf("dead-letter files after the start %v, want %v", after, want)
	}
}

// TestDeadLetterNeverSeenIncomplete: while the node writes dead letters (the
// spool's writer) and a replay writes the rows still refused (WriteDeadLetter),
// a listing and a replay running meanwhile only ever see whole files, and no
// write lands in a file already renamed .replayed: every row is read exactly
// once.
func TestDeadLetterNeverSeenIncomplete(t *testing.T) {
	dir := t.TempDir()
	const files, perFile = 100, 20
	s := &Spool{cfg: SpoolConfig{Dir: dir}}
	rows := testRows(uuid.New(), 0, perFile)
	all := make([]int, perFile)
	for i := range all {
		all[i] = i
	}
	errs := make(chan error, 2)
	write := func(f func() error) {
		for range files {
			if err := f(); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}
	go write(func() error { _, err := s.deadLetter(0, 1, rows, make([]uint64, perFile), all); return err })
	go write(func() error { _, err := WriteDeadLetter(dir, rows, make([]uint64, perFile)); return err })

	sink := newMemSink()
	replayed, writers := 0, 2
	check := func() {
		t.Helper()
		listed, err := ListDeadLetters(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range listed {
			if f.Rows != perFile || f.Damaged != 0 {
				t.Fatalf("listed %s with %d rows, %d damaged: want %d whole rows", f.Name, f.Rows, f.Damaged, perFile)
			}
			res, err := ReplayDeadLetter(context.Background(), sink, f.Path)
			if err != nil {
				t.Fatal(err)
			}
			if res.Rows != perFile || res.Damaged != 0 {
				t.Fatalf("replayed %s: %+v", f.Name, res)
			}
			replayed++
		}
	}
	for writers > 0 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
			writers--
		default:
		}
		check()
	}
	check()
	if replayed != 2*files || sink.count() != 2*files*perFile {
		t.Fatalf("%d files replayed with %d rows, want %d with %d", replayed, sink.count(), 2*files, 2*files*perFile)
	}
	for _, name := range dirNames(t, dir) {
		if !strings.HasSuffix(name, segSuffix+replayedSuffix) || strings.HasSuffix(name, replayedSuffix+replayedSuffix) {
			t.Fatalf("left in the folder: %s", name)
		}
		// A write that landed in a file after its replay shows as more rows.
		if got, _, damaged, err := ReadDeadLetter(filepath.Join(dir, name)); err != nil || damaged != 0 || len(got) != perFile {
			t.Fatalf("%s: %d rows, %d damaged, %v; want %d whole rows", name, len(got), damaged, err, perFile)
		}
	}
}
