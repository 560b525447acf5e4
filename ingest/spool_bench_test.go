package ingest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

type discardSink struct{}

func (discardSink) WriteHistory(context.Context, []storage.Row, []bool, []uint64) error { return nil }

// BenchmarkSpoolBacklog writes a backlog of 100 records of 10,000 rows (about 8 MB) (a
// ClickHouse outage, or a burst above its intake) and delivers it to a sink that
// takes everything: the spool's own cost of keeping and reading back a row.
func BenchmarkSpoolBacklog(b *testing.B) {
	const records, perRecord = 100, 10000
	rows := fleetRows(25, perRecord/100)
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

// fleetRows is a group commit of devices devices each sending points
// timestamped points of four keys, one second apart: what the spool holds under
// sluice-bench's batch100 cell (one device) or a fleet (many).
func fleetRows(devices, points int) []storage.Row {
	tenant := uuid.New()
	ids := make([]uuid.UUID, devices)
	for i := range ids {
		ids[i] = uuid.New()
	}
	rows := make([]storage.Row, 0, devices*points*4)
	for d, id := range ids {
		for p := range points {
			ts := int64(1_764_000_000_000 + p*1000 + d)
			rows = append(rows,
				storage.Row{TenantID: tenant, EntityID: id, Entry: kv.Entry{Ts: ts, Key: "temperature", Value: kv.DoubleValue(20 + float64(p%50)/10)}},
				storage.Row{TenantID: tenant, EntityID: id, Entry: kv.Entry{Ts: ts, Key: "humidity", Value: kv.DoubleValue(40.5)}},
				storage.Row{TenantID: tenant, EntityID: id, Entry: kv.Entry{Ts: ts, Key: "active", Value: kv.BoolValue(p%2 == 0)}},
				storage.Row{TenantID: tenant, EntityID: id, Entry: kv.Entry{Ts: ts, Key: "pulseCounter", Value: kv.LongValue(int64(1000 + p))}})
		}
	}
	return rows
}

// BenchmarkSpoolRecord encodes and decodes one record of 25 batch100 requests
// (10,000 rows): the spool's CPU per group commit and per delivery, and its
// bytes per row on disk.
func BenchmarkSpoolRecord(b *testing.B) {
	for _, devices := range []int{1, 25} {
		rows := fleetRows(devices, 2500/devices)
		rec := appendRecord(nil, rows)
		b.Run(fmt.Sprintf("devices=%d/encode", devices), func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 2*len(rec))
			var e recordEncoder // as a write's pooled scratch keeps it
			for b.Loop() {
				buf = e.append(buf[:0], rows, nil, 1)
			}
			b.ReportMetric(float64(len(rec))/float64(len(rows)), "bytes/row")
		})
		b.Run(fmt.Sprintf("devices=%d/decode", devices), func(b *testing.B) {
			b.ReportAllocs()
			var rd recordReader
			dst := make([]storage.Row, 0, len(rows))
			for b.Loop() {
				var err error
				if dst, err = decodeRecord(dst[:0], rec, &rd); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(rows))/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
