package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

func TestLatest(t *testing.T)        { testLatest(t, openTest(t)) }
func TestClusterLatest(t *testing.T) { testLatest(t, openClusterTest(t)) }

func testLatest(t *testing.T, s *Store) {
	ctx := context.Background()
	a, b := uuid.New(), uuid.New()
	row := func(e uuid.UUID, ts int64, key string, v kv.Value) storage.Row {
		return storage.Row{EntityID: e, Entry: kv.Entry{Ts: ts, Key: key, Value: v}}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	show := func(e uuid.UUID, keys []string) string {
		t.Helper()
		got, err := s.LatestValues(ctx, e, keys)
		must(err)
		return fmt.Sprint(got)
	}
	// repeats is the entities UpdateLatest says may repeat earlier points, as text.
	repeats := func(rows ...storage.Row) string {
		t.Helper()
		r, err := s.UpdateLatest(ctx, rows, nil)
		must(err)
		return fmt.Sprint(r)
	}
	none := fmt.Sprint([]uuid.UUID(nil))
	if got := repeats(
		row(a, 2000, "t", kv.LongValue(2)),
		row(a, 1000, "t", kv.LongValue(1)), // older in the same batch
		row(a, 5, "s", kv.StringValue("x")),
		row(b, 7, "t", kv.JSONValue(`{"z":1}`)),
	); got != none {
		t.Fatalf("first write: repeats %s", got)
	}
	if got := repeats(row(a, 1500, "t", kv.LongValue(15))); got != fmt.Sprint([]uuid.UUID{a}) { // older than stored
		t.Fatalf("older than stored: repeats %s", got)
	}
	if got, want := show(a, nil), fmt.Sprint([]kv.Entry{{Ts: 5, Key: "s", Value: kv.StringValue("x")}, {Ts: 2000, Key: "t", Value: kv.LongValue(2)}}); got != want {
		t.Fatalf("latest of a: %s, want %s", got, want)
	}
	if got := repeats(row(a, 2000, "t", kv.DoubleValue(2.5))); got != fmt.Sprint([]uuid.UUID{a}) { // equal ts: later wins
		t.Fatalf("equal ts: repeats %s", got)
	}
	if got, want := show(a, []string{"t", "missing"}), fmt.Sprint([]kv.Entry{{Ts: 2000, Key: "t", Value: kv.DoubleValue(2.5)}}); got != want {
		t.Fatalf("equal ts: %s, want %s", got, want)
	}
	// Newer points, in any order within the write, repeat nothing; two rows of one
	// ts in one write do, for their entity only.
	if got := repeats(row(b, 9, "t", kv.LongValue(9)), row(b, 8, "t", kv.LongValue(8)), row(a, 3000, "t", kv.LongValue(3))); got != none {
		t.Fatalf("newer points: repeats %s", got)
	}
	if got := repeats(row(b, 10, "t", kv.LongValue(1)), row(a, 4000, "t", kv.LongValue(1)), row(b, 10, "t", kv.LongValue(2))); got != fmt.Sprint([]uuid.UUID{b}) {
		t.Fatalf("one ts twice in a write: repeats %s", got)
	}
	if got := show(b, []string{"t"}); got != fmt.Sprint([]kv.Entry{{Ts: 10, Key: "t", Value: kv.LongValue(2)}}) {
		t.Fatalf("one ts twice in a write: latest %s", got)
	}
	if got := show(b, []string{"t"}); got != fmt.Sprint([]kv.Entry{{Ts: 10, Key: "t", Value: kv.LongValue(2)}}) {
		t.Fatalf("latest of b: %s", got)
	}
	keys, err := s.LatestKeys(ctx, a)
	must(err)
	if fmt.Sprint(keys) != "[s t]" {
		t.Fatalf("keys %v", keys)
	}
	must(s.DeleteLatest(ctx, a, []string{"s"}))
	if got := show(a, []string{"s"}); got != "[]" {
		t.Fatalf("after delete: %s", got)
	}
	must(s.DeleteLatest(ctx, a, nil))
	if keys, _ := s.LatestKeys(ctx, a); len(keys) != 0 {
		t.Fatalf("after delete all: %v", keys)
	}
}

func TestDeleteLatestIn(t *testing.T)        { testDeleteLatestIn(t, openTest(t)) }
func TestClusterDeleteLatestIn(t *testing.T) { testDeleteLatestIn(t, openClusterTest(t)) }
func TestDeleteMarks(t *testing.T)           { testDeleteMarks(t, openTest(t)) }
func TestClusterDeleteMarks(t *testing.T)    { testDeleteMarks(t, openClusterTest(t)) }

// testDeleteLatestIn: only the keys whose latest ts lies in [start, end) go, and
// they are what it returns; keys outside it, missing keys and other entities stay.
func testDeleteLatestIn(t *testing.T, s *Store) {
	ctx := context.Background()
	a, b := uuid.New(), uuid.New()
	rows := []storage.Row{
		{EntityID: a, Entry: kv.Entry{Ts: 100, Key: "in", Value: kv.LongValue(1)}},
		{EntityID: a, Entry: kv.Entry{Ts: 300, Key: "end", Value: kv.LongValue(2)}},
		{EntityID: a, Entry: kv.Entry{Ts: -5, Key: "before", Value: kv.LongValue(3)}},
		{EntityID: b, Entry: kv.Entry{Ts: 100, Key: "in", Value: kv.LongValue(4)}},
	}
	if _, err := s.UpdateLatest(ctx, rows, nil); err != nil {
		t.Fatal(err)
	}
	gone, err := s.DeleteLatestIn(ctx, a, []string{"in", "end", "before", "missing"}, 0, 300, 0)
	if err != nil || fmt.Sprint(gone) != "[in]" {
		t.Fatalf("deleted %v, %v; want [in]", gone, err)
	}
	left, err := s.LatestKeys(ctx, a)
	if err != nil || fmt.Sprint(left) != "[before end]" {
		t.Fatalf("left %v, %v", left, err)
	}
	if other, _ := s.LatestKeys(ctx, b); fmt.Sprint(other) != "[in]" {
		t.Fatalf("another entity's keys: %v", other)
	}
	if gone, err := s.DeleteLatestIn(ctx, a, []string{"end"}, 300, 300, 0); err != nil || len(gone) != 0 {
		t.Fatalf("empty range: %v %v", gone, err)
	}
}

// testDeleteMarks: a row older than a delete of its key whose range holds its
// ts, written after the delete (a write in flight when it ran), does not
// become the latest value, for history hides it; a newer row, one outside the
// range, another key's and one without a version do.
func testDeleteMarks(t *testing.T, s *Store) {
	ctx := context.Background()
	a := uuid.New()
	const del = uint64(2_000_000_000_000_000_000)
	if _, err := s.DeleteLatestIn(ctx, a, []string{"k"}, 0, 1000, del); err != nil {
		t.Fatal(err)
	}
	row := func(key string, ts int64) []storage.Row {
		return []storage.Row{{EntityID: a, Entry: kv.Entry{Ts: ts, Key: key, Value: kv.LongValue(ts)}}}
	}
	latest := func(key string) string {
		t.Helper()
		got, err := s.LatestValues(ctx, a, []string{key})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(got)
	}
	if _, err := s.UpdateLatest(ctx, row("k", 500), []uint64{del - 1}); err != nil {
		t.Fatal(err)
	}
	if got := latest("k"); got != "[]" {
		t.Fatalf("a row the delete hides became the latest value: %s", got)
	}
	for _, c := range []struct {
		key string
		ts  int64
		ver uint64
	}{{"k", 600, del + 1}, {"k", 1500, del - 1}, {"other", 500, del - 1}} {
		if _, err := s.UpdateLatest(ctx, row(c.key, c.ts), []uint64{c.ver}); err != nil {
			t.Fatal(err)
		}
		if got := latest(c.key); !strings.Contains(got, fmt.Sprint(c.ts)) {
			t.Fatalf("%s at %d (version %d) is not the latest value: %s", c.key, c.ts, c.ver, got)
		}
	}
	if _, err := s.DeleteLatestIn(ctx, a, []string{"k"}, 0, 2000, del+10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateLatest(ctx, row("k", 700), nil); err != nil {
		t.Fatal(err)
	}
	if got := latest("k"); !strings.Contains(got, "700") {
		t.Fatalf("a row without a version (a rewrite from history) was held back: %s", got)
	}
	if ttl := s.rdb.PTTL(ctx, s.markKey(a)).Val(); ttl <= 0 || ttl > deleteMarkTTL {
		t.Fatalf("the marks expire in %v", ttl)
	}
}

func TestReapplyLatest(t *testing.T)        { testReapplyLatest(t, openTest(t)) }
func TestClusterReapplyLatest(t *testing.T) { testReapplyLatest(t, openClusterTest(t)) }

// testReapplyLatest: of a delivery, only rows of keys a rewrite noted are
// applied again, and of those the newest the delete does not hide, though a
// hidden one is newer.
func testReapplyLatest(t *testing.T, s *Store) {
	ctx := context.Background()
	a := uuid.New()
	const del = uint64(2_000_000_000_000_000_000)
	if _, err := s.DeleteLatestIn(ctx, a, []string{"k"}, 150, 300, del); err != nil {
		t.Fatal(err)
	}
	rows := []storage.Row{
		{EntityID: a, Entry: kv.Entry{Ts: 100, Key: "k", Value: kv.LongValue(1)}},
		{EntityID: a, Entry: kv.Entry{Ts: 200, Key: "k", Value: kv.LongValue(2)}}, // hidden
		{EntityID: a, Entry: kv.Entry{Ts: 100, Key: "other", Value: kv.LongValue(3)}},
	}
	vers := []uint64{del - 3, del - 2, del - 1}
	if err := s.ReapplyLatest(ctx, rows, vers); err != nil {
		t.Fatal(err)
	}
	if keys, _ := s.LatestKeys(ctx, a); len(keys) != 0 {
		t.Fatalf("applied without a rewrite noted: %v", keys)
	}
	if err := s.NoteRewrite(ctx, a, []string{"k"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReapplyLatest(ctx, rows, vers); err != nil {
		t.Fatal(err)
	}
	got, err := s.LatestValues(ctx, a, nil)
	if err != nil || len(got) != 1 || got[0].Key != "k" || got[0].Ts != 100 {
		t.Fatalf("latest %+v %v, want k at 100 only", got, err)
	}
}
