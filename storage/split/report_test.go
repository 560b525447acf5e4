package split_test

import (
	"context"
	"testing"

	"github.com/sluice-iot/sluice/internal/testenv"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/clickhouse"
	"github.com/sluice-iot/sluice/storage/redis"
	"github.com/sluice-iot/sluice/storage/split"
	"github.com/sluice-iot/sluice/storage/storagetest"
)

// TestClickHouseRedisReport runs the report conformance suite on the production
// shape: the report is one ClickHouse query. It needs CLICKHOUSE_ADDR and
// REDIS_ADDR, and skips without them unless SLUICE_REQUIRE_SERVICES=1.
func TestClickHouseRedisReport(t *testing.T) {
	env := testenv.Service(t, "CLICKHOUSE_ADDR", "REDIS_ADDR")
	storagetest.RunReport(t, func(t *testing.T) storage.Backend {
		ctx := context.Background()
		name := fresh()
		tel, err := clickhouse.Open(ctx, clickhouse.Options{Addrs: []string{env[0]}, Database: "sluice_test_" + name})
		if err != nil {
			t.Fatal(err)
		}
		state, err := redis.Open(ctx, redis.Options{Addrs: []string{env[1]}, Prefix: "sluicetest:" + name + ":"})
		if err != nil {
			tel.Close()
			t.Fatal(err)
		}
		b := split.New(tel, state)
		t.Cleanup(func() {
			tel.Drop(ctx)
			state.Drop(ctx)
			b.Close()
		})
		return b
	})
}

// TestReportsOff: a telemetry back end that builds no reports gives an error,
// not a panic, until Reports is set.
func TestReportsOff(t *testing.T) {
	var b split.Backend
	if _, err := b.Report(t.Context(), storage.ReportQuery{}); err == nil {
		t.Fatal("a report without a report store")
	}
}
