package embedded

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/testenv"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/storagetest"
)

// The tests re-run their own binary as a second process; childEnv says what the
// child does with the folder in childDir.
const (
	childEnv = "SLUICE_EMBEDDED_TEST_CHILD"
	childDir = "SLUICE_EMBEDDED_TEST_DIR"
)

var (
	childEntity = uuid.MustParse("33333333-3333-4333-8333-333333333333")
	childRow    = storage.Row{EntityID: childEntity, Entry: kv.Entry{Ts: 42, Key: "k", Value: kv.StringValue("durable")}}
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role, os.Getenv(childDir)))
	}
	os.Exit(m.Run())
}

func runChild(role, dir string) int {
	db, err := Open(dir, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	switch role {
	case "write-and-die":
		if err := db.Write(context.Background(), []storage.Row{childRow}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		// Exit without Close or Flush: only the synced log holds the row.
		return 0
	case "hold":
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		return 0
	}
	return 3
}

func child(t *testing.T, role, dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role, childDir+"="+dir)
	cmd.Stderr = os.Stderr
	return cmd
}

func open(t *testing.T, dir string) *DB {
	t.Helper()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Backend { return open(t, t.TempDir()) })
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir)
	ctx := t.Context()
	id := uuid.New()
	rec := storage.Record{Kind: "device", ID: id, Data: []byte("d"), Unique: []string{"name:x"}}
	row := storage.Row{EntityID: id, Entry: kv.Entry{Ts: 1, Key: "k", Value: kv.LongValue(7)}}
	attr := kv.Entry{Ts: 2, Key: "a", Value: kv.BoolValue(true)}
	if err := db.Write(ctx, []storage.Row{row}); err != nil {
		t.Fatal(err)
	}
	if err := db.SaveAttributes(ctx, id, storage.ServerScope, []kv.Entry{attr}); err != nil {
		t.Fatal(err)
	}
	if err := db.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = open(t, dir)
	latest, err := db.Latest(ctx, id, nil)
	if err != nil || len(latest) != 1 || latest[0] != row.Entry {
		t.Fatalf("Latest after reopen: %v, %v", latest, err)
	}
	attrs, err := db.GetAttributes(ctx, id, storage.ServerScope, nil)
	if err != nil || len(attrs) != 1 || attrs[0] != attr {
		t.Fatalf("GetAttributes after reopen: %v, %v", attrs, err)
	}
	if _, err := db.Lookup(ctx, "device", "name:x"); err != nil {
		t.Fatalf("Lookup after reopen: %v", err)
	}
}

// TestDurableWithoutClose checks that a row is on disk once Write returns: the
// child process writes it and exits without closing.
func TestDurableWithoutClose(t *testing.T) {
	dir := t.TempDir()
	if out, err := child(t, "write-and-die", dir).Output(); err != nil {
		t.Fatalf("child: %v %s", err, out)
	}
	db := open(t, dir)
	got, err := db.Read(t.Context(), storage.ReadQuery{EntityID: childEntity, Key: "k", StartTs: 0, EndTs: 100})
	if err != nil || len(got) != 1 || got[0] != childRow.Entry {
		t.Fatalf("Read after child exit: %v, %v", got, err)
	}
}

func TestSecondOpenFails(t *testing.T) {
	dir := t.TempDir()
	checkLocked := func(what string) {
		t.Helper()
		_, err := Open(dir, Options{})
		if err == nil || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("%s: Open of a folder in use: got %v, want an error saying it is in use", what, err)
		}
	}

	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkLocked("same process")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := child(t, "hold", dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("child did not open the folder: %q, %v", line, err)
	}
	checkLocked("other process")
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	// The lock goes with the process.
	open(t, dir)
}

func TestClosed(t *testing.T) {
	db, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	row := storage.Row{EntityID: uuid.New(), Entry: kv.Entry{Ts: 1, Key: "k", Value: kv.LongValue(1)}}
	if err := db.Write(t.Context(), []storage.Row{row}); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Write after Close: got %v, want ErrUnavailable", err)
	}
	if _, err := db.Get(t.Context(), "device", uuid.New()); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Get after Close: got %v, want ErrUnavailable", err)
	}
}

// TestAwkwardNames checks keys and kinds holding the escape bytes 0x00 and 0x01,
// and negative timestamps.
func TestAwkwardNames(t *testing.T) {
	db := open(t, t.TempDir())
	ctx := t.Context()
	id := uuid.New()
	keys := []string{"", "\x00", "\x01", "a", "a\x00", "a\x00b", "a\x01", "a\x01\x00", "ab"}
	var rows []storage.Row
	for i, k := range keys {
		for _, ts := range []int64{-10, -1, 0, 1} {
			rows = append(rows, storage.Row{EntityID: id, Entry: kv.Entry{Ts: ts, Key: k, Value: kv.LongValue(int64(i))}})
		}
	}
	if err := db.Write(ctx, rows); err != nil {
		t.Fatal(err)
	}
	got, err := db.SeriesKeys(ctx, id)
	if err != nil || strings.Join(got, "|") != strings.Join(keys, "|") {
		t.Fatalf("SeriesKeys: got %q, %v; want %q", got, err, keys)
	}
	for i, k := range keys {
		pts, err := db.Read(ctx, storage.ReadQuery{EntityID: id, Key: k, StartTs: -5, EndTs: 1, Asc: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(pts) != 2 || pts[0].Ts != -1 || pts[1].Ts != 0 || pts[0].Value.Long != int64(i) || pts[1].Value.Long != int64(i) {
			t.Fatalf("Read %q: got %v, want ts -1 and 0 of value %d", k, pts, i)
		}
	}
	// Over the whole int64 range the ts bytes start with 0x00 too, right after the
	// key, where an unescaped "a" would reach into "a\x00".
	all := storage.ReadQuery{EntityID: id, StartTs: math.MinInt64, EndTs: math.MaxInt64}
	for _, k := range keys {
		q := all
		q.Key = k
		if pts, err := db.Read(ctx, q); err != nil || len(pts) != 4 {
			t.Fatalf("Read %q over all time: got %d points, %v; want 4", k, len(pts), err)
		}
	}
	if err := db.DeleteSeries(ctx, storage.DeleteQuery{EntityID: id, Keys: []string{"a"}, StartTs: math.MinInt64, EndTs: math.MaxInt64}); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		q := all
		q.Key = k
		pts, err := db.Read(ctx, q)
		if want := 4 * btoi(k != "a"); err != nil || len(pts) != want {
			t.Fatalf("Read %q after deleting \"a\": got %d points, %v; want %d", k, len(pts), err, want)
		}
	}

	for _, kind := range []string{"dev", "dev\x00", "dev\x00x", "dev\x01"} {
		if err := db.Put(ctx, storage.Record{Kind: kind, ID: id, Unique: []string{"u"}}); err != nil {
			t.Fatalf("Put kind %q: %v", kind, err)
		}
	}
	for _, kind := range []string{"dev", "dev\x00", "dev\x00x", "dev\x01"} {
		list, err := db.List(ctx, kind, uuid.Nil)
		if err != nil || len(list) != 1 || list[0].Kind != kind {
			t.Fatalf("List kind %q: %v, %v", kind, list, err)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// BenchmarkWrite measures synced writes of the batches the ingest layer sends:
// 100 rows over 10 devices of 10 keys each.
func BenchmarkWrite(b *testing.B) {
	db, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ids := make([]uuid.UUID, 10)
	for i := range ids {
		ids[i] = uuid.New()
	}
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = fmt.Sprintf("key%d", i)
	}
	rows := make([]storage.Row, 0, 100)
	ctx := context.Background()
	b.ReportAllocs()
	var ts int64
	for b.Loop() {
		ts++
		rows = rows[:0]
		for _, id := range ids {
			for _, k := range keys {
				rows = append(rows, storage.Row{EntityID: id, Entry: kv.Entry{Ts: ts, Key: k, Value: kv.DoubleValue(float64(ts) / 3)}})
			}
		}
		if err := db.Write(ctx, rows); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(rows))/b.Elapsed().Seconds(), "rows/s")
}

func TestStallListener(t *testing.T) {
	before, seconds := writeStalls.Get(), writeStallSeconds.Get()
	l := stallListener(slog.New(slog.DiscardHandler))
	l.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
	time.Sleep(5 * time.Millisecond)
	l.WriteStallEnd()
	if writeStalls.Get() != before+1 || writeStallSeconds.Get() < seconds+0.004 {
		t.Fatalf("stalls %d → %d, seconds %f → %f", before, writeStalls.Get(), seconds, writeStallSeconds.Get())
	}
}

// A debug logger sees every flush: Close flushes the memtable.
func TestFlushLoggedAtDebug(t *testing.T) {
	var out testenv.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	db, err := Open(t.TempDir(), Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	row := storage.Row{EntityID: uuid.New(), Entry: kv.Entry{Ts: 1, Key: "k", Value: kv.LongValue(7)}}
	if err := db.Write(context.Background(), []storage.Row{row}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `msg="storage flushed memtables"`) {
		t.Fatalf("no flush in the debug log:\n%s", out.String())
	}
}
