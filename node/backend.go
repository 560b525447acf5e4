package node

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-iot/sluice/config"
	"github.com/sluice-iot/sluice/ingest"
	"github.com/sluice-iot/sluice/notify"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/clickhouse"
	"github.com/sluice-iot/sluice/storage/embedded"
	"github.com/sluice-iot/sluice/storage/redis"
	"github.com/sluice-iot/sluice/storage/split"
)

// backend is what a node runs on: storage, the cross-node notifier, and the JWT
// signing key every node of the deployment shares.
type backend struct {
	store      storage.Backend
	notifier   notify.Notifier
	signingKey []byte
	// spool is the ClickHouse spool of the production back ends (nil embedded).
	spool *ingest.Spool
	// dropCaches is set once the engine exists; the notifier calls it when its
	// subscription was interrupted and messages may have been lost.
	dropCaches atomic.Pointer[func()]
}

func (b *backend) close() error {
	nerr := b.notifier.Close()
	serr := b.store.Close()
	if nerr != nil {
		return nerr
	}
	return serr
}

// openBackend opens the embedded default, or ClickHouse + Redis when configured.
// tally counts the rows the spool delivers.
func openBackend(ctx context.Context, cfg config.Config, log *slog.Logger, tally ingest.Tally) (*backend, error) {
	if !cfg.Production() {
		db, err := embedded.Open(filepath.Join(cfg.Data.Dir, "embedded"), embedded.Options{Logger: log, MinFreeBytes: minFreeBytes(cfg.Data.MinFreeMB)})
		if err != nil {
			return nil, fmt.Errorf("cannot open the embedded store in %s: %w", cfg.Data.Dir, err)
		}
		key, err := localSigningKey(cfg)
		if err != nil {
			db.Close()
			return nil, err
		}
		return &backend{store: db, notifier: notify.NewLocal(), signingKey: key}, nil
	}

	// A node may start while ClickHouse is down: its calls are unavailable
	// (telemetry waits in the spool) until it is reached.
	ch, err := clickhouse.OpenRetrying(ctx, ClickHouseOptions(cfg), log, clickhouseRetryEvery)
	if err != nil {
		return nil, fmt.Errorf("cannot use ClickHouse at %s (CLICKHOUSE_ADDR): %w", cfg.ClickHouse.CHAddr, err)
	}
	redis.SetLogger(log)
	rs, err := redis.Open(ctx, redis.Options{
		Addrs:    strings.Split(cfg.Redis.RedisAddr, ","),
		Cluster:  cfg.Redis.RedisCluster,
		Password: cfg.Redis.RedisPassword,
		Prefix:   cfg.Redis.RedisPrefix,
	})
	if err != nil {
		ch.Close()
		return nil, fmt.Errorf("cannot use Redis at %s (REDIS_ADDR): %w", cfg.Redis.RedisAddr, err)
	}
	spool, err := ingest.OpenSpool(ingest.SpoolConfig{
		Dir:           filepath.Join(cfg.Data.Dir, "spool"),
		MaxBytes:      cfg.Spool.SpoolMaxBytes,
		BatchRows:     cfg.Spool.SpoolBatchRows,
		FlushInterval: time.Duration(cfg.Spool.SpoolFlushInterval) * time.Millisecond,
		Shards:        cfg.Spool.SpoolShards,
		Logger:        log,
		Tally:         tally,
	}, ingest.ReapplyLatest(ch, rs, log))
	if err != nil {
		ch.Close()
		rs.Close()
		return nil, err
	}
	store := split.New(&ingest.Spooled{Spool: spool, History: ch, LatestStore: rs}, rs)
	store.Reports = ch // reports read history in ClickHouse directly
	b := &backend{store: store, spool: spool}
	key, err := sharedSigningKey(ctx, cfg, rs)
	if err != nil {
		b.store.Close()
		return nil, err
	}
	if err := checkSigningKey(ctx, rs, key, log); err != nil {
		b.store.Close()
		return nil, err
	}
	b.signingKey = key
	b.notifier, err = notify.NewRedis(ctx, rs.Client(), cfg.Redis.RedisPrefix+"notify:", log, func() {
		if f := b.dropCaches.Load(); f != nil {
			(*f)()
		}
	})
	if err != nil {
		b.store.Close()
		return nil, fmt.Errorf("cannot subscribe to notifications on Redis: %w", err)
	}
	return b, nil
}

// clickhouseRetryEvery is how often a node started without ClickHouse tries
// to reach it.
const clickhouseRetryEvery = 5 * time.Second

func generateKey() []byte {
	raw := make([]byte, 64)
	rand.Read(raw)
	return []byte(base64.RawStdEncoding.EncodeToString(raw))
}

// localSigningKey returns the configured JWT key, or the one generated on first
// start and kept in the data folder, so tokens stay valid across restarts.
func localSigningKey(cfg config.Config) ([]byte, error) {
	if cfg.Auth.SigningKey != "" {
		return []byte(cfg.Auth.SigningKey), nil
	}
	path := filepath.Join(cfg.Data.Dir, "jwt-signing.key")
	if b, err := os.ReadFile(path); err == nil && len(b) >= 32 {
		return b, nil
	}
	key := generateKey()
	if err := os.WriteFile(path, key, 0o600); err != nil {
		return nil, fmt.Errorf("cannot keep the generated JWT signing key in %s: %w", path, err)
	}
	return key, nil
}

// checkSigningKey registers the fingerprint of this node's JWT signing key in
// Redis and logs an error when the node registered before used another key:
// behind a load balancer each would refuse the other's tokens ("Token has
// expired"), and users would be logged out at random. It does not refuse to
// start, since a key rotation passes through such a moment; the message says so.
func checkSigningKey(ctx context.Context, rs *redis.Store, key []byte, log *slog.Logger) error {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("sluice JWT signing key fingerprint"))
	fp := hex.EncodeToString(m.Sum(nil))[:16]
	prev, err := rs.SwapShared(ctx, "jwt-key-fingerprint", []byte(fp))
	if err != nil {
		return fmt.Errorf("cannot register the JWT signing key's fingerprint in Redis: %w", err)
	}
	if len(prev) > 0 && string(prev) != fp {
		log.Error("this node's JWT signing key differs from the one the node started before it used: each refuses the other's tokens; "+
			"give every node the same JWT_TOKEN_SIGNING_KEY (or none, to share a generated one). During a key rotation this is expected once",
			"fingerprint", fp, "previous", string(prev))
	}
	return nil
}

// sharedSigningKey returns the configured JWT key, or one generated by the first
// node and kept in Redis, so every node accepts every node's tokens.
func sharedSigningKey(ctx context.Context, cfg config.Config, rs *redis.Store) ([]byte, error) {
	if cfg.Auth.SigningKey != "" {
		return []byte(cfg.Auth.SigningKey), nil
	}
	key, err := rs.SharedValue(ctx, "jwt-signing-key", generateKey)
	if err != nil {
		return nil, fmt.Errorf("cannot share the generated JWT signing key through Redis: %w", err)
	}
	return key, nil
}

// minFreeBytes is SLUICE_DATA_MIN_FREE_MB for embedded.Options: 0 is no guard.
func minFreeBytes(mb int) int64 {
	if mb == 0 {
		return -1
	}
	return int64(mb) << 20
}

// ClickHouseOptions are the ClickHouse settings of cfg, for the node and for
// the tools that write where it does (sluice deadletter replay).
func ClickHouseOptions(cfg config.Config) clickhouse.Options {
	return clickhouse.Options{
		Addrs:       strings.Split(cfg.ClickHouse.CHAddr, ","),
		Database:    cfg.ClickHouse.CHDatabase,
		Username:    cfg.ClickHouse.CHUser,
		Password:    cfg.ClickHouse.CHPassword,
		Cluster:     cfg.ClickHouse.CHCluster,
		Compression: cfg.ClickHouse.CHCompression,
	}
}
