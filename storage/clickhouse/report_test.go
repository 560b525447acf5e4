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
