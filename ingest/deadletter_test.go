package ingest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	chdriver "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/testenv"
	"github.com/sluice-iot/sluice/internal/version"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/clickhouse"
)

// writeSpoolDeadLetter writes rows[i] for each i in dead to a dead-letter file in
// dir with the spool's own writer, as lane 2's record 7, and returns its path
// and the rows' versions.
func writeSpoolDeadLetter(t *testing.T, dir string, rows []storage.Row, dead []int) (string, []uint64) {
	t.Helper()
	base := version.Reserve(len(rows))
	vers := make([]uint64, len(rows))
	for i := range vers {
		vers[i] = base + uint64(i)
	}
	s := &Spool{cfg: SpoolConfig{Dir: dir}}
	path, err := s.deadLetter(2, 7, rows, vers, dead)
	if err != nil {
		t.Fatal(err)
	}
	return path, vers
}

// dirNames returns the names of the files in dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// unavailableSink answers every write as a history store that is down.
type unavailableSink struct{ writes int }

func (u *unavailableSink) WriteHistory(context.Context, []storage.Row, []bool, []uint64) error {
	u.writes++
	return fmt.Errorf("clickhouse: cannot insert into telemetry: %w: connection refused", storage.ErrUnavailable)
}

// TestDeadLetterRead: the rows of a file the spool wrote read back with their
// versions, values of every type included, and the listing counts them.
func TestDeadLetterRead(t *testing.T) {
	dir := t.TempDir()
	rows := testRows(uuid.New(), 0, 6)
	rows[1].Value = kv.BoolValue(true)
	rows[2].Value = kv.DoubleValue(math.NaN())
	rows[3].Value = kv.StringValue("héllo")
	rows[4].Value = kv.JSONValue(`{"a":[1,2]}`)
	path, vers := writeSpoolDeadLetter(t, dir, rows, []int{0, 1, 2, 3, 4, 5})

	got, gotVers, damaged, err := ReadDeadLetter(path)
	if err != nil || damaged != 0 {
		t.Fatalf("read: %d damaged, %v", damaged, err)
	}
	if len(got) != len(rows) || !slices.Equal(gotVers, vers) {
		t.Fatalf("read %d rows with versions %v, want %d with %v", len(got), gotVers, len(rows), vers)
	}
	for i := range rows {
		if got[i].TenantID != rows[i].TenantID || got[i].EntityID != rows[i].EntityID || got[i].Key != rows[i].Key ||
			got[i].Ts != rows[i].Ts || !got[i].Value.Same(rows[i].Value) {
			t.Fatalf("row %d: %+v, want %+v", i, got[i], rows[i])
		}
	}
	files, err := ListDeadLetters(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if len(files) != 1 || files[0].Path != path || files[0].Rows != 6 || files[0].Damaged != 0 || files[0].Bytes != st.Size() {
		t.Fatalf("listed %+v", files)
	}
}

// TestDeadLetterReadDamaged: a record whose bytes do not check out, and a
// write cut off at the end, are counted as damage; the records around them
// are read.
func TestDeadLetterReadDamaged(t *testing.T) {
	dir := t.TempDir()
	rows := testRows(uuid.New(), 0, 3)
	path, vers := writeSpoolDeadLetter(t, dir, rows, []int{0, 1, 2})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff                  // in the second record
	b = append(b, b[:recHeaderLen+2]...) // half a record
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	got, gotVers, damaged, err := ReadDeadLetter(path)
	if err != nil {
		t.Fatal(err)
	}
	if damaged != 2 || len(got) != 2 || got[0].Ts != 0 || got[1].Ts != 2 || !slices.Equal(gotVers, []uint64{vers[0], vers[2]}) {
		t.Fatalf("read %+v %v with %d damaged, want rows 0 and 2 and 2 damaged", got, gotVers, damaged)
	}
	if files, err := ListDeadLetters(dir); err != nil || len(files) != 1 || files[0].Rows != 2 || files[0].Damaged != 2 {
		t.Fatalf("listed %+v, %v", files, err)
	}
}

// TestDeadLetterReplay: the rows the store takes are written with their
// versions as possible repeats; the one it still refuses alone goes to a new
// dead-letter file with its version and origin; the replayed file is renamed,
// kept whole, and no longer listed.
func TestDeadLetterReplay(t *testing.T) {
	dir := t.TempDir()
	rows := testRows(uuid.New(), 0, 5)
	rows[3].Key = "poison"
	path, vers := writeSpoolDeadLetter(t, dir, rows, []int{0, 1, 2, 3, 4})
	orig, _ := os.ReadFile(path)
	sink := &poisonSink{memSink: newMemSink()}

	res, err := ReplayDeadLetter(context.Background(), sink, path)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 5 || res.Written != 4 || res.Refused != 1 || res.RefusedTo == "" || res.RenamedTo != path+".replayed" {
		t.Fatalf("replay: %+v", res)
	}
	slices.SortFunc(sink.rows, func(a, b storage.Row) int { return int(a.Ts - b.Ts) })
	slices.Sort(sink.vers) // versions count up with ts here
	if ts := sink.deliveredTs(); !slices.Equal(ts, []int64{0, 1, 2, 4}) {
		t.Fatalf("written ts %v", ts)
	}
	if want := []uint64{vers[0], vers[1], vers[2], vers[4]}; !slices.Equal(sink.vers, want) {
		t.Fatalf("written versions %v, want %v", sink.vers, want)
	}
	if slices.Contains(sink.repeat, false) {
		t.Fatal("a replayed row written as a new point")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the replayed file is still there: %v", err)
	}
	if kept, _ := os.ReadFile(res.RenamedTo); !bytes.Equal(kept, orig) {
		t.Fatal("the renamed file differs from the replayed one")
	}
	dead, deadVers, damaged, err := ReadDeadLetter(res.RefusedTo)
	if err != nil || damaged != 0 || len(dead) != 1 || dead[0].Key != "poison" || deadVers[0] != vers[3] {
		t.Fatalf("refused rows %+v %v, %d damaged, %v", dead, deadVers, damaged, err)
	}
	if got := deadLetters(t, dir, 2, 7); len(got) != 1 { // every file in the spool's format, from lane 2's record 7
		t.Fatalf("dead letters %+v", got)
	}
	files, err := ListDeadLetters(dir)
	if err != nil || len(files) != 1 || files[0].Path != res.RefusedTo || files[0].Rows != 1 {
		t.Fatalf("listed %+v, %v", files, err)
	}
}

// TestDeadLetterReplayTwice: a file replayed again (renamed back) writes the
// same rows with the same versions, which the store keeps once.
func TestDeadLetterReplayTwice(t *testing.T) {
	dir := t.TempDir()
	path, vers := writeSpoolDeadLetter(t, dir, testRows(uuid.New(), 0, 3), []int{0, 1, 2})
	sink := newMemSink()
	res, err := ReplayDeadLetter(context.Background(), sink, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(res.RenamedTo, path); err != nil {
		t.Fatal(err)
	}
	if _, err := ReplayDeadLetter(context.Background(), sink, path); err != nil {
		t.Fatal(err)
	}
	if want := slices.Concat(vers, vers); !slices.Equal(sink.vers, want) {
		t.Fatalf("versions written %v, want %v", sink.vers, want)
	}
	if names := dirNames(t, dir); len(names) != 1 || names[0] != filepath.Base(res.RenamedTo) {
		t.Fatalf("files %v", names)
	}
}

// TestDeadLetterReplayChangesNothing: a replay that fails leaves the folder as
// it was: the store unavailable, the store refusing every row (the cause not
// mended), a file renamed before, a name no listing shows (a file replayed
// already, one being written, a segment of the log).
func TestDeadLetterReplayChangesNothing(t *testing.T) {
	refuseAll := &poisonSink{memSink: newMemSink(), all: true}
	for _, c := range []struct {
		name  string
		sink  Sink
		setup func(t *testing.T, path string) string
	}{
		{"unavailable", &unavailableSink{}, nil},
		{"all refused", refuseAll, nil},
		{"replayed before", newMemSink(), func(t *testing.T, path string) string {
			if err := os.WriteFile(path+".replayed", nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return path
		}},
		{"replayed file", newMemSink(), func(t *testing.T, path string) string {
			// Not replayed again, nor renamed .replayed.replayed.
			if err := os.Rename(path, path+replayedSuffix); err != nil {
				t.Fatal(err)
			}
			return path + replayedSuffix
		}},
		{"being written", newMemSink(), func(t *testing.T, path string) string {
			if err := os.Rename(path, path+tmpSuffix); err != nil {
				t.Fatal(err)
			}
			return path + tmpSuffix
		}},
		{"segment", newMemSink(), func(t *testing.T, path string) string {
			seg := filepath.Join(filepath.Dir(path), segName(1))
			if err := os.Rename(path, seg); err != nil {
				t.Fatal(err)
			}
			return seg
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path, _ := writeSpoolDeadLetter(t, dir, testRows(uuid.New(), 0, 4), []int{0, 1, 2, 3})
			if c.setup != nil {
				path = c.setup(t, path)
			}
			before := dirNames(t, dir)
			orig, _ := os.ReadFile(path)
			if res, err := ReplayDeadLetter(context.Background(), c.sink, path); err == nil {
				t.Fatalf("replay succeeded: %+v", res)
			}
			if after := dirNames(t, dir); !slices.Equal(after, before) {
				t.Fatalf("files %v, before %v", after, before)
			}
			if b, _ := os.ReadFile(path); !bytes.Equal(b, orig) {
				t.Fatal("the file changed")
			}
		})
	}
	if n := refuseAll.count(); n != 0 {
		t.Fatalf("%d rows written", n)
	}
}

// TestDeadLetterWriteRoundTrip: WriteDeadLetter's file reads back, rows of
// records without a version (0) included.
func TestDeadLetterWriteRoundTrip(t *testing.T) {
	dir := t.TempDir()
	rows := testRows(uuid.New(), 0, 3)
	vers := []uint64{0, version.Reserve(1), 0}
	path, err := WriteDeadLetter(dir, rows, vers)
	if err != nil {
		t.Fatal(err)
	}
	got, gotVers, damaged, err := ReadDeadLetter(path)
	if err != nil || damaged != 0 || len(got) != 3 || !slices.Equal(gotVers, vers) || got[2].Ts != 2 {
		t.Fatalf("read %+v %v, %d damaged, %v", got, gotVers, damaged, err)
	}
	// Two files written at once get two names.
	again, err := WriteDeadLetter(dir, rows, vers)
	if err != nil || again == path {
		t.Fatalf("second file %s, %v", again, err)
	}
}

// TestDeadLetterReplayClickHouse replays a dead-letter file into a real
// ClickHouse, twice: the rows read back once each, with the versions the spool
// gave them.
func TestDeadLetterReplayClickHouse(t *testing.T) {
	store, conn, db := openClickHouseTest(t)
	ctx := context.Background()

	dir := t.TempDir()
	id := uuid.New()
	rows := testRows(id, 1_700_000_000_000, 4)
	rows[2].Value = kv.StringValue("fixed")
	path, vers := writeSpoolDeadLetter(t, dir, rows, []int{0, 1, 2, 3})
	for range 2 {
		res, err := ReplayDeadLetter(ctx, store, path)
		if err != nil {
			t.Fatal(err)
		}
		if res.Written != 4 || res.Refused != 0 {
			t.Fatalf("replay: %+v", res)
		}
		if err := os.Rename(res.RenamedTo, path); err != nil { // as an operator would, to replay again
			t.Fatal(err)
		}
	}

	got, err := store.Read(ctx, storage.ReadQuery{EntityID: id, Key: "k", StartTs: rows[0].Ts, EndTs: rows[3].Ts + 1, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("read %d rows back, want 4: %+v", len(got), got)
	}
	for _, e := range got {
		i := int(e.Ts - rows[0].Ts)
		if !e.Value.Same(rows[i].Value) {
			t.Fatalf("row at %d: %+v, want %+v", e.Ts, e.Value, rows[i].Value)
		}
	}
	var stored []uint64
	q, err := conn.Query(ctx, "SELECT DISTINCT ver FROM "+db+".telemetry WHERE entity_id = toUUID(?) ORDER BY ver", id.String())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for q.Next() {
		var v uint64
		if err := q.Scan(&v); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, v)
	}
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored, vers) {
		t.Fatalf("versions in ClickHouse %v, want the spool's %v", stored, vers)
	}
}

// cancelSink is a history store that takes rows until the replay is
// interrupted (cancel, after its first write), then fails as ClickHouse's
// driver does then: with the context's error, not storage.ErrUnavailable.
type cancelSink struct {
	poisonSink
	cancel context.CancelFunc
}

func (c *cancelSink) WriteHistory(ctx context.Context, rows []storage.Row, mayRepeat []bool, vers []uint64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("clickhouse: cannot insert into telemetry: %w", err)
	}
	defer c.cancel()
	return c.poisonSink.WriteHistory(ctx, rows, mayRepeat, vers)
}

// TestDeadLetterReplayInterrupted: a replay interrupted (SIGINT, its context
// ends) while it looks for the rows the store refuses alone fails and changes
// no file, as `sluice deadletter replay` says: the rows it found refused are
// not moved to a new file, nor is the file renamed.
func TestDeadLetterReplayInterrupted(t *testing.T) {
	dir := t.TempDir()
	rows := testRows(uuid.New(), 0, 8)
	rows[1].Key, rows[6].Key = "poison", "poison"
	path, _ := writeSpoolDeadLetter(t, dir, rows, []int{0, 1, 2, 3, 4, 5, 6, 7})
	before := dirNames(t, dir)
	orig, _ := os.ReadFile(path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Halving finds row 1 refused alone and takes rows 0, 2-5; the replay is
	// interrupted before the half holding row 6.
	sink := &cancelSink{poisonSink: poisonSink{memSink: newMemSink()}}
	sink.cancel = func() {
		if sink.count() >= 5 {
			cancel()
		}
	}
	if res, err := ReplayDeadLetter(ctx, sink, path); err == nil {
		t.Fatalf("an interrupted replay succeeded: %+v", res)
	}
	if n := sink.count(); n != 5 {
		t.Fatalf("%d rows written before the interruption, want 5: the test does not interrupt a replay under way", n)
	}
	if after := dirNames(t, dir); !slices.Equal(after, before) {
		t.Fatalf("files %v, before %v", after, before)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, orig) {
		t.Fatal("the file changed")
	}
}

// TestDeadLetterPlaceLostTemp: a replay whose temporary file a starting node
// removed (removeDeadLetterTemps) fails to place it and leaves no
// dead-letter file: its rows are still in the file it replays.
func TestDeadLetterPlaceLostTemp(t *testing.T) {
	dir := t.TempDir()
	tmp := deadLetterName(dir) + tmpSuffix
	if err := os.WriteFile(tmp, []byte("records"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := removeDeadLetterTemps(dir); err != nil || n != 1 {
		t.Fatalf("removed %d temporary files, %v", n, err)
	}
	if path, err := placeDeadLetter(dir, tmp); err == nil {
		t.Fatalf("a removed temporary file placed as %s", path)
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("files %v", names)
	}
}

// TestDeadLetterReplayClickHouseAfterDelete: a delete made after the rows were
// acknowledged hides them in a real ClickHouse however late they are replayed,
// and when replayed again, as README.md says of a second replay.
func TestDeadLetterReplayClickHouseAfterDelete(t *testing.T) {
	store, _, _ := openClickHouseTest(t)
	ctx := context.Background()

	dir := t.TempDir()
	id := uuid.New()
	rows := testRows(id, 1_700_000_000_000, 4)
	path, _ := writeSpoolDeadLetter(t, dir, rows, []int{0, 1, 2, 3}) // versions taken: acknowledged
	read := func() []kv.Entry {
		t.Helper()
		got, err := store.Read(ctx, storage.ReadQuery{EntityID: id, Key: "k", StartTs: rows[0].Ts, EndTs: rows[3].Ts + 1, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// Rows 1 and 2 deleted after their acknowledgement, before any replay.
	if err := store.DeleteSeries(ctx, storage.DeleteQuery{EntityID: id, Keys: []string{"k"}, StartTs: rows[1].Ts, EndTs: rows[3].Ts}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		res, err := ReplayDeadLetter(ctx, store, path)
		if err != nil || res.Written != 4 {
			t.Fatalf("replay %d: %+v, %v", i, res, err)
		}
		got := read()
		slices.SortFunc(got, func(a, b kv.Entry) int { return int(a.Ts - b.Ts) })
		if len(got) != 2 || got[0].Ts != rows[0].Ts || got[1].Ts != rows[3].Ts {
			t.Fatalf("replay %d: read %+v, want the rows at %d and %d only", i, got, rows[0].Ts, rows[3].Ts)
		}
		if err := os.Rename(res.RenamedTo, path); err != nil {
			t.Fatal(err)
		}
	}
}

// openClickHouseTest opens a store on a fresh database of the test ClickHouse,
// and a plain connection to look into it; the database is dropped at the end
// of the test.
func openClickHouseTest(t *testing.T) (*clickhouse.Store, chdriver.Conn, string) {
	t.Helper()
	addr := testenv.Service(t, "CLICKHOUSE_ADDR")[0]
	var b [6]byte
	rand.Read(b[:])
	db := "sluice_test_deadletter_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	store, err := clickhouse.Open(ctx, clickhouse.Options{Addrs: []string{addr}, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := chdriver.Open(&chdriver.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		store.Close()
		conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db)
		conn.Close()
	})
	return store, conn, db
}
