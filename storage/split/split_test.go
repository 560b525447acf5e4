package split_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/sluice-iot/sluice/internal/testenv"
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
	env := testenv.Service(t, "CLICKHOUSE_ADDR", "REDIS_ADDR")
	chAddr, redisAddr := env[0], env[1]
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
