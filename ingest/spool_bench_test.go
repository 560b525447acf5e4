package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

type discardSink struct{}

func (discardSink) WriteHistory(context.Context, []storage.Row, []bool) error { return nil }

// BenchmarkSpoolBacklog writes a backlog of 100 records of 10,000 rows (about 45 MB) (a
// ClickHouse outage, or a burst above its intake) and delivers it to a sink that
// takes everything: the spool's own cost of keeping and reading back a row.
func BenchmarkSpoolBacklog(b *testing.B) {
	const records, perRecord = 100, 10000
	rows := testRows(uuid.New(), 0, perRecord)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s, err := OpenSpool(SpoolConfig{Dir: b.TempDir(), FlushInterval: time.Hour}, discardSink{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for range records {
			if err := s.Write(context.Background(), rows); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Close(context.Background())
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*records*perRecord)/b.Elapsed().Seconds(), "rows/s")
}
