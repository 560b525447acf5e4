package split_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/clickhouse"
	"github.com/sluice-iot/sluice/storage/redis"
	"github.com/sluice-iot/sluice/storage/split"
	"github.com/sluice-iot/sluice/storage/storagetest"
)

// TestClickHouseRedis runs the suite on the production shape: ClickHouse
// telemetry, Redis entities and attributes. It needs CLICKHOUSE_ADDR and
// REDIS_ADDR, and skips without them unless SLUICE_REQUIRE_SERVICES=1.
func TestClickHouseRedis(t *testing.T) {
	chAddr, redisAddr := os.Getenv("CLICKHOUSE_ADDR"), os.Getenv("REDIS_ADDR")
	if chAddr == "" || redisAddr == "" {
		if os.Getenv("SLUICE_REQUIRE_SERVICES") == "1" {
			t.Fatal("CLICKHOUSE_ADDR or REDIS_ADDR is unset but SLUICE_REQUIRE_SERVICES=1: start the servers with scripts/services.sh")
		}
		t.Skip("CLICKHOUSE_ADDR or REDIS_ADDR is unset; eval \"$(scripts/services.sh)\" to run against them")
	}
	storagetest.Run(t, func(t *testing.T) storage.Backend {
		ctx := context.Background()
		name := fresh()
		tel, err := clickhouse.Open(ctx, clickhouse.Options{Addrs: []string{chAddr}, Database: "sluice_test_" + name})
		if err != nil {
			t.Fatal(err)
		}
		state, err := redis.Open(ctx, redis.Options{Addrs: []string{redisAddr}, Prefix: "sluicetest:" + name + ":"})
		if err != nil {
			tel.Close()
			t.Fatal(err)
		}
		b := split.New(tel, state)
		t.Cleanup(func() {
			if err := tel.Drop(ctx); err != nil {
				t.Errorf("drop test database: %v", err)
			}
			if err := state.Drop(ctx); err != nil {
				t.Errorf("delete test keys: %v", err)
			}
			if err := b.Close(); err != nil {
				t.Error(err)
			}
		})
		return b
	})
}

func fresh() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
