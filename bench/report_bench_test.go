package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	chgo "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/ingest"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/clickhouse"
	"github.com/sluice-iot/sluice/storage/embedded"
	"github.com/sluice-iot/sluice/storage/redis"
	"github.com/sluice-iot/sluice/storage/split"
)

// BenchmarkReport builds one analytics report over 1,000 devices × 10,000 points
// (10 million) on each back end: 10 buildings (a server attribute) × days in
// Europe/Kyiv (across the spring DST change) × AVG, SUM, MAX and COUNT. It times
// engine.BuildReport, as the report API calls it: devices and their attributes
// are resolved from the state store, then one report query runs. Loading takes
// minutes, so it runs only with SLUICE_BENCH_REPORT=1 (RESULTS.md has the command);
// SLUICE_BENCH_REPORT_POINTS sets the points per device.
func BenchmarkReport(b *testing.B) {
	if os.Getenv("SLUICE_BENCH_REPORT") == "" {
		b.Skip("set SLUICE_BENCH_REPORT=1: loads 10 million points into each back end")
	}
	perDevice := 10_000
	if s := os.Getenv("SLUICE_BENCH_REPORT_POINTS"); s != "" {
		perDevice, _ = strconv.Atoi(s)
	}
	const devices = 1000
	b.Run("embedded", func(b *testing.B) {
		db, err := embedded.Open(b.TempDir(), embedded.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		benchReport(b, db, devices, perDevice, func() {}, nil)
	})
	b.Run("clickhouse", func(b *testing.B) {
		chAddr, redisAddr := os.Getenv("CLICKHOUSE_ADDR"), os.Getenv("REDIS_ADDR")
		if chAddr == "" || redisAddr == "" {
			b.Skip("CLICKHOUSE_ADDR and REDIS_ADDR are unset")
		}
		ctx := context.Background()
		var r [6]byte
		rand.Read(r[:])
		name := hex.EncodeToString(r[:])
		ch, err := clickhouse.Open(ctx, clickhouse.Options{Addrs: []string{chAddr}, Database: "sluice_bench_" + name})
		if err != nil {
			b.Fatal(err)
		}
		rs, err := redis.Open(ctx, redis.Options{Addrs: []string{redisAddr}, Prefix: "sluicebench:" + name + ":"})
		if err != nil {
			b.Fatal(err)
		}
		// History goes in as in production: latest values to Redis, which tells
		// which rows may repeat points, and the rows through the spool to
		// ClickHouse (the days of repeating rows marked, the rest read without
		// FINAL).
		spool, err := ingest.OpenSpool(ingest.SpoolConfig{Dir: b.TempDir()}, ch)
		if err != nil {
			b.Fatal(err)
		}
		store := split.New(&ingest.Spooled{Spool: spool, History: ch, LatestStore: rs}, rs)
		store.Reports = ch
		defer func() {
			if os.Getenv("SLUICE_BENCH_REPORT_KEEP") != "" { // for EXPLAIN-style experiments
				b.Logf("kept ClickHouse database sluice_bench_%s", name)
				return
			}
			ch.Drop(ctx)
			rs.Drop(ctx)
			store.Close()
		}()
		delivered := func() {
			if err := spool.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
		benchReport(b, store, devices, perDevice, delivered, func() {
			// The state of history once ClickHouse has merged it: one part per
			// partition, read without FINAL.
			conn, err := chgo.Open(&chgo.Options{Addr: []string{chAddr}})
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			if err := conn.Exec(ctx, "OPTIMIZE TABLE sluice_bench_"+name+".telemetry FINAL"); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// benchReport loads the devices and points, waits for delivered() to return
// (the spool drained into ClickHouse), then times the report as loaded
// ("fresh") and, with merge, after merge() ("merged").
func benchReport(b *testing.B, store storage.Backend, devices, perDevice int, delivered, merge func()) {
	ctx := context.Background()
	eng := engine.New(store, engine.Config{BcryptCost: 4})
	if _, err := eng.Bootstrap(ctx, true, ""); err != nil {
		b.Fatal(err)
	}
	access, _, err := eng.Login(ctx, engine.DemoTenantAdminEmail, "tenant")
	if err != nil {
		b.Fatal(err)
	}
	p, err := eng.Authenticate(ctx, "Bearer "+access)
	if err != nil {
		b.Fatal(err)
	}
	loadStart := time.Now()
	start := time.Date(2024, 3, 25, 0, 0, 0, 0, time.UTC).UnixMilli()
	const step = 60_000
	batch := make([]storage.Row, 0, 100_000)
	flush := func() {
		if err := store.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := range devices {
		d, err := eng.SaveDevice(ctx, p, &engine.Device{Name: fmt.Sprintf("meter-%04d", i), Type: "meter"}, "")
		if err != nil {
			b.Fatal(err)
		}
		building := kv.Entry{Ts: 1, Key: "building", Value: kv.StringValue(fmt.Sprintf("B%02d", i%10))}
		if err := store.SaveAttributes(ctx, d.ID.ID, storage.ServerScope, []kv.Entry{building}); err != nil {
			b.Fatal(err)
		}
		for j := range perDevice {
			batch = append(batch, storage.Row{TenantID: p.TenantID, EntityID: d.ID.ID,
				Entry: kv.Entry{Ts: start + int64(j)*step, Key: "energy", Value: kv.DoubleValue(float64(j%1000) / 4)}})
			if len(batch) == cap(batch) {
				flush()
			}
		}
	}
	if len(batch) > 0 {
		flush()
	}
	delivered()
	end := start + int64(perDevice)*step
	v, err := eng.SaveView(ctx, p, &engine.View{
		Name: "bench", Source: engine.ViewSource{DeviceProfile: "meter"}, TimeZone: "Europe/Kyiv",
		Range: engine.ViewRange{Type: "ABSOLUTE", StartTs: start, EndTs: end},
		Fields: []engine.ViewField{
			{Label: "Building", Source: engine.SourceAttribute, Key: "building", Scope: "SERVER_SCOPE"},
			{Label: "Date", Source: engine.SourceDate, Grouping: "RAW", GroupBy: "DAY"},
			{Label: "avg", Source: engine.SourceTelemetry, Key: "energy", Aggregation: "AVG"},
			{Label: "sum", Source: engine.SourceTelemetry, Key: "energy", Aggregation: "SUM"},
			{Label: "max", Source: engine.SourceTelemetry, Key: "energy", Aggregation: "MAX"},
			{Label: "n", Source: engine.SourceTelemetry, Key: "energy", Aggregation: "COUNT"},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded %d points from %d devices in %v", devices*perDevice, devices, time.Since(loadStart).Round(time.Second))
	req := engine.ReportRequest{ViewConfigID: v.ID.ID.String()}
	measure := func(b *testing.B) {
		var rows int
		for b.Loop() {
			rep, err := eng.BuildReport(ctx, p, req)
			if err != nil {
				b.Fatal(err)
			}
			rows = len(rep.Rows)
			var n int64
			for _, r := range rep.Rows {
				n += r[5].(int64)
			}
			if n != int64(devices*perDevice) {
				b.Fatalf("the report counts %d points, want %d", n, devices*perDevice)
			}
		}
		b.ReportMetric(float64(rows), "rows")
		b.ReportMetric(float64(devices*perDevice)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mpoints/s")
	}
	b.Run("fresh", measure)
	if merge != nil {
		merge()
		b.Run("merged", measure)
	}
}
