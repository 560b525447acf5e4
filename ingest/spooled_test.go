package ingest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/sluice-iot/sluice/ingest"
	"github.com/sluice-iot/sluice/internal/testenv"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/clickhouse"
	"github.com/sluice-iot/sluice/storage/redis"
	"github.com/sluice-iot/sluice/storage/split"
	"github.com/sluice-iot/sluice/storage/storagetest"
)

// flushed makes every Write wait for the spool's delivery, so the conformance
// suite, which reads history right after writing, sees the production write path:
// spool → ClickHouse for history, Redis for latest values.
type flushed struct{ *ingest.Spooled }

func (f flushed) Write(ctx context.Context, rows []storage.Row) error {
	if err := f.Spooled.Write(ctx, rows); err != nil {
		return err
	}
	return f.Spool.Flush(ctx)
}

func TestSpooledConformance(t *testing.T) {
	env := testenv.Service(t, "CLICKHOUSE_ADDR", "REDIS_ADDR")
	chAddr, redisAddr := env[0], env[1]
	storagetest.Run(t, func(t *testing.T) storage.Backend {
		ctx := context.Background()
		var b [6]byte
		rand.Read(b[:])
		name := hex.EncodeToString(b[:])
		ch, err := clickhouse.Open(ctx, clickhouse.Options{Addrs: []string{chAddr}, Database: "sluice_test_" + name})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := redis.Open(ctx, redis.Options{Addrs: []string{redisAddr}, Prefix: "sluicetest:" + name + ":"})
		if err != nil {
			ch.Close()
			t.Fatal(err)
		}
		// 10,000-row deliveries: the concurrency cases write a few hundred
		// thousand rows, and smaller inserts reach ClickHouse sooner.
		spool, err := ingest.OpenSpool(ingest.SpoolConfig{Dir: t.TempDir(), BatchRows: 10000}, ch)
		if err != nil {
			t.Fatal(err)
		}
		tel := &ingest.Spooled{Spool: spool, History: ch, LatestStore: rs}
		backend := split.New(flushed{tel}, rs)
		t.Cleanup(func() {
			ch.Drop(ctx)
			rs.Drop(ctx)
			backend.Close()
		})
		return backend
	})
}
