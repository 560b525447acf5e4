package clickhouse

import (
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
		if got, err := s.mergedRanges(ctx, march, april+30*86400_000); err != nil || len(got) != want {
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
	if merged, err := s.mergedRanges(ctx, march, march+86400_000); err != nil || len(merged) != 0 {
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
