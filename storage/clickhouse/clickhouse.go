// Package clickhouse is the production Telemetry back end: history, latest values
// and aggregated reads in ClickHouse over the native protocol. It implements
// storage.Telemetry only; compose it with an Entities and Attributes back end
// (storage/redis) through storage/split. The SQL runs on ClickHouse 18.16 (the CI
// version) and on current releases; the table layout is described in schema.go.
package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluice-iot/sluice/storage"
)

// Options say where ClickHouse is. The zero value connects to 127.0.0.1:9000 as
// "default" without a password and uses the database "sluice".
type Options struct {
	// Addrs are host:port addresses of the native protocol; several are tried in order.
	Addrs []string
	// Database holds the tables; it is created when missing. Default "sluice".
	Database string
	Username string
	Password string
	// DialTimeout bounds connecting; 0 means 5s.
	DialTimeout time.Duration
	// MaxOpenConns caps the connection pool; 0 means 16.
	MaxOpenConns int
}

// Store is the ClickHouse telemetry back end. It is safe for concurrent use.
type Store struct {
	conn   driver.Conn
	db     string // quoted database name, used to qualify every table
	clock  clock
	closed atomic.Bool
}

var _ storage.Telemetry = (*Store)(nil)

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Open connects, creates the database when missing and applies the schema
// migrations it has not applied yet (see schema.go).
func Open(ctx context.Context, opts Options) (*Store, error) {
	if len(opts.Addrs) == 0 {
		opts.Addrs = []string{"127.0.0.1:9000"}
	}
	if opts.Database == "" {
		opts.Database = "sluice"
	}
	if !identifier.MatchString(opts.Database) {
		return nil, fmt.Errorf("clickhouse: database name %q must be letters, digits and underscores", opts.Database)
	}
	if opts.Username == "" {
		opts.Username = "default"
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.MaxOpenConns <= 0 {
		opts.MaxOpenConns = 16
	}
	conn, err := ch.Open(&ch.Options{
		Protocol: ch.Native, // the HTTP interface of the driver fails on 18.16
		Addr:     opts.Addrs,
		Auth: ch.Auth{
			// The session starts in "default": the database may not exist yet.
			Database: "default",
			Username: opts.Username,
			Password: opts.Password,
		},
		DialTimeout:  opts.DialTimeout,
		MaxOpenConns: opts.MaxOpenConns,
		MaxIdleConns: opts.MaxOpenConns,
		Compression:  &ch.Compression{Method: ch.CompressionLZ4},
	})
	if err != nil {
		return nil, fmt.Errorf("cannot connect to clickhouse at %v: %w: %w", opts.Addrs, storage.ErrUnavailable, err)
	}
	s := &Store{conn: conn, db: "`" + opts.Database + "`"}
	if err := s.migrate(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the connections. Calls after Close return storage.ErrUnavailable.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.conn.Close()
}

func (s *Store) check() error {
	if s.closed.Load() {
		return fmt.Errorf("clickhouse store is closed: %w", storage.ErrUnavailable)
	}
	return nil
}

// fail wraps err with what failed. Errors the server answered with (bad SQL, bad
// data) keep their kind; everything else (refused or dropped connections, a closed
// pool) is storage.ErrUnavailable so callers know to retry.
func fail(what string, err error) error {
	var ex *ch.Exception
	if errors.As(err, &ex) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("clickhouse: cannot %s: %w", what, err)
	}
	return fmt.Errorf("clickhouse: cannot %s: %w: %w", what, storage.ErrUnavailable, err)
}

// table qualifies a table name with the database.
func (s *Store) table(name string) string { return s.db + "." + name }

// clock hands out write versions: nanoseconds since the epoch, strictly
// increasing within the process even when the wall clock stalls or steps back.
// Versions order writes to the same (entity, key, ts) and place writes before or
// after a delete; across nodes they are as good as the clocks' synchronisation.
type clock struct{ last atomic.Uint64 }

// next reserves n consecutive versions and returns the first.
func (c *clock) next(n int) uint64 {
	for {
		last := c.last.Load()
		base := max(uint64(time.Now().UnixNano()), last+1)
		if c.last.CompareAndSwap(last, base+uint64(n)-1) {
			return base
		}
	}
}

// Drop deletes the database with all its tables: for tests and decommissioning.
func (s *Store) Drop(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := s.conn.Exec(ctx, "DROP DATABASE IF EXISTS "+s.db); err != nil {
		return fail("drop database "+s.db, err)
	}
	return nil
}
