package clickhouse

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// TestReportMergedPartitions: a point written twice is counted once whether its
// partition is read with FINAL (several parts) or without (one merged part), and
// a report over a merged and an unmerged partition adds both up.
func TestReportMergedPartitions(t *testing.T) {
	s := OpenTest(t)
	ctx := t.Context()
	dev := uuid.New()
	march, april := int64(1709251200000), int64(1711929600000) // 2024-03-01, 2024-04-01 UTC
	write := func(ts int64, v int64) {
		t.Helper()
		if err := s.Write(ctx, []storage.Row{{EntityID: dev, Entry: kv.Entry{Ts: ts, Key: "e", Value: kv.LongValue(v)}}}); err != nil {
			t.Fatal(err)
		}
	}
	end := april + 30*86400_000
	count := func(what string, want int64) {
		t.Helper()
		rows, err := s.Report(ctx, storage.ReportQuery{Devices: []uuid.UUID{dev}, Groups: []uint32{0}, Keys: []string{"e"},
			StartTs: march, EndTs: end, Aggs: storage.ReportCount | storage.ReportSum})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].Count != want {
			t.Fatalf("%s: rows %+v, want one counting %d", what, rows, want)
		}
	}
	merged := func(want int) {
		t.Helper()
		if got, _, err := s.mergedRanges(ctx, march, april+30*86400_000); err != nil || len(got) != want {
			t.Fatalf("merged partitions %v (%v), want %d", got, err, want)
		}
	}
	write(march+1000, 1)
	write(march+1000, 1) // a replay: a second part with the same point
	write(march+2000, 2)
	merged(0)
	count("unmerged", 2)
	if err := s.conn.Exec(ctx, "OPTIMIZE TABLE "+s.table("telemetry")+" FINAL"); err != nil {
		t.Fatal(err)
	}
	merged(1)
	count("merged, the range past it", 2)
	end = april
	count("merged, the range inside it", 2)
	end = april + 30*86400_000
	write(march+1000, 1) // the replay again, after the merge: FINAL again
	write(april+1000, 3)
	merged(0)
	count("merged, then written", 3)
	if err := s.conn.Exec(ctx, "OPTIMIZE TABLE "+s.table("telemetry")+" PARTITION 202403 FINAL"); err != nil {
		t.Fatal(err)
	}
	merged(1)
	count("one merged partition and one not", 3)
}

// TestReportRacingDelivery: a delivery whose mark and repeated rows land between
// a report's look at which rows need FINAL and its query does not make the
// report count a point twice, whether the partition was one merged part (read
// without FINAL) or the day was not marked yet.
func TestReportRacingDelivery(t *testing.T) {
	s := OpenTest(t)
	ctx := t.Context()
	march := int64(1709251200000) // 2024-03-01 UTC
	for _, merged := range []bool{true, false} {
		dev := uuid.New()
		point := []storage.Row{{EntityID: dev, Entry: kv.Entry{Ts: march + 1000, Key: "e", Value: kv.LongValue(1)}}}
		if err := s.WriteHistory(ctx, point, []bool{false}, nil); err != nil {
			t.Fatal(err)
		}
		if merged {
			if err := s.conn.Exec(ctx, "OPTIMIZE TABLE "+s.table("telemetry")+" FINAL"); err != nil {
				t.Fatal(err)
			}
			if got, _, err := s.mergedRanges(ctx, march, march+86400_000); err != nil || len(got) != 1 {
				t.Fatalf("merged partitions %v (%v), want the one", got, err)
			}
		}
		attempts := 0
		s.beforeReportQuery = func() {
			if attempts++; attempts == 1 { // the device sends the point again
				if err := s.WriteHistory(ctx, point, []bool{true}, nil); err != nil {
					t.Error(err)
				}
			}
		}
		rows, err := s.Report(ctx, storage.ReportQuery{Devices: []uuid.UUID{dev}, Groups: []uint32{0}, Keys: []string{"e"},
			StartTs: march, EndTs: march + 86400_000, Aggs: storage.ReportCount})
		s.beforeReportQuery = nil
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].Count != 1 || attempts != 2 {
			t.Fatalf("merged %v: rows %+v after %d attempts, want one counting 1 after 2", merged, rows, attempts)
		}
	}
}

// TestReportFinalBranches: the FINAL read split into one branch per server
// thread still counts every point once, takes the later write of a replayed
// point, and reads every device exactly once, for any number of branches
// (including more branches than devices).
func TestReportFinalBranches(t *testing.T) {
	s := OpenTest(t)
	ctx := t.Context()
	const devices = 7
	march := int64(1709251200000) // 2024-03-01 UTC
	var ids []uuid.UUID
	var groups []uint32
	for i := range devices {
		ids = append(ids, uuid.New())
		groups = append(groups, uint32(i%3))
	}
	write := func(v int64) {
		t.Helper()
		var rows []storage.Row
		for i, id := range ids {
			for j := range 5 {
				rows = append(rows, storage.Row{EntityID: id, Entry: kv.Entry{Ts: march + int64(j)*1000, Key: "e", Value: kv.LongValue(v * int64(i+1))}})
			}
		}
		if err := s.Write(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	write(1)
	write(10) // every point again, in a second part: the later value wins
	if merged, _, err := s.mergedRanges(ctx, march, march+86400_000); err != nil || len(merged) != 0 {
		t.Fatalf("merged partitions %v (%v), want none: the test needs a FINAL read", merged, err)
	}
	var wantSum [3]float64
	for i := range devices {
		wantSum[i%3] += 5 * 10 * float64(i+1)
	}
	for _, branches := range []int32{1, 2, 3, devices, 16} {
		s.threads.Store(branches)
		rows, err := s.Report(ctx, storage.ReportQuery{Devices: ids, Groups: groups, Keys: []string{"e"},
			StartTs: march, EndTs: march + 86400_000, Aggs: storage.ReportCount | storage.ReportSum})
		if err != nil {
			t.Fatalf("%d branches: %v", branches, err)
		}
		if len(rows) != 3 {
			t.Fatalf("%d branches: %d rows %+v, want 3 groups", branches, len(rows), rows)
		}
		for _, r := range rows {
			n := int64(0)
			for i := range devices {
				if uint32(i%3) == r.Group {
					n += 5
				}
			}
			if r.Count != n || r.Sum != wantSum[r.Group] {
				t.Errorf("%d branches: group %d counts %d summing %v, want %d summing %v", branches, r.Group, r.Count, r.Sum, n, wantSum[r.Group])
			}
		}
	}
}

// TestReportRepeatMarks: rows written with WriteHistory as new points are read
// without FINAL, so a copy of one that was (wrongly) not marked shows twice —
// which is how this test sees the fast path taken; a copy whose day is marked is
// counted once, and only its day is read with FINAL; Write marks every day it
// writes. Run on a single server and on the two-shard cluster.
func TestReportRepeatMarks(t *testing.T)        { testReportRepeatMarks(t, OpenTest(t)) }
func TestClusterReportRepeatMarks(t *testing.T) { testReportRepeatMarks(t, openClusterTest(t)) }

func testReportRepeatMarks(t *testing.T, s *Store) {
	ctx := t.Context()
	a, b := uuid.New(), uuid.New()
	day := int64(86400_000)
	march := int64(1709251200000) // 2024-03-01 UTC
	row := func(e uuid.UUID, ts, v int64) storage.Row {
		return storage.Row{EntityID: e, Entry: kv.Entry{Ts: ts, Key: "e", Value: kv.LongValue(v)}}
	}
	history := func(rows []storage.Row, mayRepeat []bool) {
		t.Helper()
		if err := s.WriteHistory(ctx, rows, mayRepeat, nil); err != nil {
			t.Fatal(err)
		}
	}
	// count reports the points of each device over March 1-3 as "a/b".
	count := func() string {
		t.Helper()
		rows, err := s.Report(ctx, storage.ReportQuery{Devices: []uuid.UUID{a, b}, Groups: []uint32{0, 1}, Keys: []string{"e"},
			StartTs: march, EndTs: march + 3*day, Aggs: storage.ReportCount | storage.ReportSum})
		if err != nil {
			t.Fatal(err)
		}
		var n [2]int64
		for _, r := range rows {
			n[r.Group] += r.Count
		}
		return fmt.Sprintf("%d/%d", n[0], n[1])
	}
	history([]storage.Row{row(a, march, 1), row(a, march+day, 2), row(b, march, 3)}, []bool{false, false, false})
	if got := count(); got != "2/1" {
		t.Fatalf("new points: %s, want 2/1", got)
	}
	history([]storage.Row{row(a, march, 1)}, []bool{false}) // a copy its caller did not mark
	if got := count(); got != "3/1" {
		t.Fatalf("an unmarked copy: %s, want 3/1 (the fast path reads without FINAL)", got)
	}
	history([]storage.Row{row(a, march+day, 5), row(b, march+2*day, 6)}, []bool{true, false}) // a marked copy, a new point
	if got := count(); got != "3/2" {
		t.Fatalf("a marked copy: %s, want 3/2 (March 2 of a read with FINAL, March 1 still not)", got)
	}
	if err := s.Write(ctx, []storage.Row{row(b, march, 7)}); err != nil { // Write marks its days itself
		t.Fatal(err)
	}
	if got := count(); got != "3/2" {
		t.Fatalf("a copy by Write: %s, want 3/2", got)
	}
	// The later copy wins on a marked day.
	rows, err := s.Report(ctx, storage.ReportQuery{Devices: []uuid.UUID{b}, Groups: []uint32{0}, Keys: []string{"e"},
		StartTs: march, EndTs: march + day, Aggs: storage.ReportSum})
	if err != nil || len(rows) != 1 || rows[0].Sum != 7 {
		t.Fatalf("b on March 1: %+v (%v), want a sum of 7", rows, err)
	}
	// A nil mayRepeat marks every row.
	history([]storage.Row{row(b, march+2*day, 6)}, nil)
	if got := count(); got != "3/2" {
		t.Fatalf("WriteHistory(nil): %s, want 3/2", got)
	}
	if err := s.WriteHistory(ctx, []storage.Row{row(a, march, 1)}, []bool{true, false}, nil); err == nil {
		t.Fatal("WriteHistory took two flags for one row")
	}
}

// TestUpgradeMarksEarlierHistory: history written before telemetry_repeats
// existed carries no marks, so the migration marks every day of it: a point
// stored twice back then is counted once after the upgrade.
func TestUpgradeMarksEarlierHistory(t *testing.T) {
	s := OpenTest(t)
	ctx := t.Context()
	dev := uuid.New()
	march := int64(1709251200000) // 2024-03-01 UTC
	old := []storage.Row{{EntityID: dev, Entry: kv.Entry{Ts: march, Key: "e", Value: kv.LongValue(1)}}}
	for range 2 { // two copies, unmarked, as an earlier version left them
		if err := s.WriteHistory(ctx, old, []bool{false}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Forget the migrations, as a database of that version would not have them.
	if err := s.conn.Exec(ctx, "DROP TABLE "+s.table("schema_migrations")); err != nil {
		t.Fatal(err)
	}
	again, err := Open(ctx, Options{Addrs: []string{addr(t)}, Database: s.db[1 : len(s.db)-1]})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	rows, err := again.Report(ctx, storage.ReportQuery{Devices: []uuid.UUID{dev}, Groups: []uint32{0}, Keys: []string{"e"},
		StartTs: march, EndTs: march + 86400_000, Aggs: storage.ReportCount})
	if err != nil || len(rows) != 1 || rows[0].Count != 1 {
		t.Fatalf("after the upgrade: %+v (%v), want one point", rows, err)
	}
}
