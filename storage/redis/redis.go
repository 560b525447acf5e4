// Package redis is the production Entities and Attributes back end, on a single
// Redis or a Redis Cluster through redis.UniversalClient. It implements
// storage.Entities and storage.Attributes; compose it with a Telemetry back end
// (storage/clickhouse) through storage/split.
//
// Key layout, with P the Options.Prefix. Every key carries a hash tag so that the
// keys one operation touches share a cluster slot:
//
//	P{e:<kind>}:r:<id>   hash    record: "o" owner (16 bytes), "d" data
//	P{e:<kind>}:ru:<id>  list    the record's unique values, in order
//	P{e:<kind>}:u        hash    unique value -> id (16 bytes)
//	P{e:<kind>}:o        zset    <owner><id> (32 bytes), all scores 0: List is a
//	                             lexicographic range, ids in byte order
//	P{a:<entity>}:<scope> hash   attribute key -> encoded value (see value.go)
//
// A Put checks and updates a whole kind atomically in one Lua script, so all
// records of one kind live in one slot: a cluster spreads kinds, not the records
// of a kind. That keeps unique indexes exact without cross-slot transactions.
//
// Durability is the server's: "Durable when it returns nil" holds with
// appendonly yes and appendfsync always (configs/production.yaml). WAITAOF is not
// used: it waits for the writes of its own connection, and the pool may send it on
// another one; Debian's Redis 7.0 lacks it anyway.
package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluice-iot/sluice/storage"
)

// Options say where Redis is. The zero value uses a single Redis at
// 127.0.0.1:6379 with the key prefix "sluice:".
type Options struct {
	// Addrs are host:port addresses. Two or more, or Cluster, mean a Redis Cluster.
	Addrs    []string
	Cluster  bool
	Username string
	Password string
	// DB selects the database of a single Redis; a cluster has only 0.
	DB int
	// Prefix starts every key; it must not contain '{' or '}'. Default "sluice:".
	Prefix string
	// DialTimeout bounds connecting; 0 means 5s.
	DialTimeout time.Duration
}

// Store is the Redis back end. It is safe for concurrent use.
type Store struct {
	rdb    goredis.UniversalClient
	prefix string
	closed atomic.Bool
}

var (
	_ storage.Entities   = (*Store)(nil)
	_ storage.Attributes = (*Store)(nil)
)

// Open connects and checks that Redis answers.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if len(opts.Addrs) == 0 {
		opts.Addrs = []string{"127.0.0.1:6379"}
	}
	if opts.Prefix == "" {
		opts.Prefix = "sluice:"
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("redis: key prefix %q must not contain '{' or '}': they would move the hash tag", opts.Prefix)
	}
	if opts.DB != 0 && (opts.Cluster || len(opts.Addrs) > 1) {
		// The cluster client would silently use database 0.
		return nil, fmt.Errorf("redis: database %d selected, but a Redis Cluster has only database 0", opts.DB)
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	rdb := goredis.NewUniversalClient(&goredis.UniversalOptions{
		Addrs:         opts.Addrs,
		IsClusterMode: opts.Cluster,
		Username:      opts.Username,
		Password:      opts.Password,
		DB:            opts.DB,
		DialTimeout:   opts.DialTimeout,
		// Neither is needed, and a Redis without them answers each new
		// connection's try with an error that sluice_redis_errors_total
		// would count on a healthy Redis.
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	rdb.AddHook(errorHook{})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("cannot connect to redis at %v: %w: %w", opts.Addrs, storage.ErrUnavailable, err)
	}
	return &Store{rdb: rdb, prefix: opts.Prefix}, nil
}

// Close releases the connections. Calls after Close return storage.ErrUnavailable.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.rdb.Close()
}

func (s *Store) check() error {
	if s.closed.Load() {
		return fmt.Errorf("redis store is closed: %w", storage.ErrUnavailable)
	}
	return nil
}

// fail wraps err with what failed; connection trouble becomes storage.ErrUnavailable.
func fail(what string, err error) error {
	var netErr net.Error
	if errors.Is(err, goredis.ErrClosed) || errors.As(err, &netErr) {
		return fmt.Errorf("redis: cannot %s: %w: %w", what, storage.ErrUnavailable, err)
	}
	return fmt.Errorf("redis: cannot %s: %w", what, err)
}

// Keys; see the package comment.
func (s *Store) kindTag(kind string) string { return s.prefix + "{e:" + kind + "}" }
func (s *Store) recordKey(kind string, id uuid.UUID) string {
	return s.kindTag(kind) + ":r:" + id.String()
}
func (s *Store) recordUniqueKey(kind string, id uuid.UUID) string {
	return s.kindTag(kind) + ":ru:" + id.String()
}
func (s *Store) uniqueKey(kind string) string { return s.kindTag(kind) + ":u" }
func (s *Store) ownersKey(kind string) string { return s.kindTag(kind) + ":o" }
func (s *Store) attrKey(entity uuid.UUID, scope storage.Scope) string {
	return s.prefix + "{a:" + entity.String() + "}:" + scope.String()
}

// Drop deletes every key under the prefix, on every master of a cluster: for
// tests and decommissioning.
func (s *Store) Drop(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	drop := func(ctx context.Context, c goredis.Cmdable) error {
		iter := c.Scan(ctx, 0, s.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := s.rdb.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return drop(ctx, c) })
	} else {
		err = drop(ctx, s.rdb)
	}
	if err != nil {
		return fail("delete keys under "+s.prefix, err)
	}
	return nil
}

// Client returns the store's Redis client, for the node's notifier to share.
func (s *Store) Client() goredis.UniversalClient { return s.rdb }

// Prefix returns the key prefix of the store.
func (s *Store) Prefix() string { return s.prefix }

// SwapShared stores value under name and returns what was there before (nil:
// nothing).
func (s *Store) SwapShared(ctx context.Context, name string, value []byte) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	old, err := s.rdb.SetArgs(ctx, s.prefix+"{shared}:"+name, value, goredis.SetArgs{Get: true}).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fail("swap shared value "+name, err)
	}
	return old, nil
}

// SharedValue returns the value stored under name, first storing gen() there if
// there is none (SET NX), so every node of a cluster ends up with the same value:
// the generated JWT signing key is kept this way.
func (s *Store) SharedValue(ctx context.Context, name string, gen func() []byte) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	key := s.prefix + "{shared}:" + name
	if err := s.rdb.SetNX(ctx, key, gen(), 0).Err(); err != nil {
		return nil, fail("store shared value "+name, err)
	}
	v, err := s.rdb.Get(ctx, key).Bytes()
	if err != nil {
		return nil, fail("read shared value "+name, err)
	}
	return v, nil
}
