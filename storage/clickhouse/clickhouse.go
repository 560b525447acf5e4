// Package clickhouse is the production Telemetry back end: history, latest values
// and aggregated reads in ClickHouse over the native protocol. It implements
// storage.Telemetry only; compose it with an Entities and Attributes back end
// (storage/redis) through storage/split. The SQL runs on ClickHouse 18.16 (the CI
// version) and on current releases; the table layout is described in schema.go.
// With Options.Cluster the tables are sharded over a ClickHouse cluster by
// device (cluster.go).
package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
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
	// Database holds the tables; it is created when missing (unless
	// NoMigrate). Default "sluice".
	Database string
	Username string
	Password string
	// DialTimeout bounds connecting; 0 means 5s.
	DialTimeout time.Duration
	// MaxOpenConns caps the connection pool; 0 means 16.
	MaxOpenConns int
	// Cluster names a cluster of the servers' remote_servers: the tables are
	// sharded over it (see cluster.go). Empty means one server, as Addrs names.
	Cluster string
	// Compression of the blocks sent: "lz4" (also the empty string), "zstd" or
	// "none". Over a network LZ4 sends a delivery in a fraction of the bytes;
	// with the server on the same host it only costs CPU: 100,000-row deliveries
	// took in 0.72-0.75M rows/s without it against 0.67-0.70M with it, the node
	// and ClickHouse on the same 2 cores (bench/RESULTS.md).
	Compression string
	// NoMigrate opens without creating or changing anything: no database, no
	// table, no migration. Open then fails unless the database holds the
	// tables of every migration (schema.go), as a node of this version left
	// them on the server it connects to: for a tool that must not write into
	// a fresh database because a name or an address was wrong
	// (`sluice deadletter replay`).
	NoMigrate bool
}

// Store is the ClickHouse telemetry back end. It is safe for concurrent use.
type Store struct {
	conn    driver.Conn
	opts    Options
	db      string   // quoted database name, used to qualify every table
	cluster string   // Options.Cluster
	servers []string // on a cluster: host:port of every server, where the local tables are
	closed  atomic.Bool
	threads atomic.Int32 // max_threads of the server, once read (report.go)
	// unlimitedPartitions is set on servers that limit the partitions of an
	// INSERT block (max_partitions_per_insert_block, 100 by default, which
	// 18.16 does not have): a delivery of a backfill over more than 100
	// months would fail the same way on every retry and stop its spool lane.
	unlimitedPartitions bool

	// beforeReportQuery, when set (tests), runs between a report's look at
	// which rows need FINAL and its query.
	beforeReportQuery func()
}

var _ storage.Telemetry = (*Store)(nil)

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Open connects, creates the database when missing and applies the schema
// migrations it has not applied yet (see schema.go): on a cluster, on every
// server of it (see cluster.go). With Options.NoMigrate it only checks that
// the schema is there (checkSchema).
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
	if opts.Cluster != "" && !clusterName.MatchString(opts.Cluster) {
		return nil, fmt.Errorf("clickhouse: cluster name %q must be letters, digits, '_', '-' and '.'", opts.Cluster)
	}
	s := &Store{opts: opts, db: "`" + opts.Database + "`", cluster: opts.Cluster}
	conn, err := s.dial(opts.Addrs, opts.MaxOpenConns)
	if err != nil {
		return nil, err
	}
	s.conn = conn
	switch {
	case opts.NoMigrate:
		err = s.checkSchema(ctx)
	case s.cluster == "":
		err = s.migrate(ctx, conn)
	default:
		err = s.migrateCluster(ctx)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	var n uint64
	err = conn.QueryRow(ctx, `SELECT count() FROM system.settings WHERE name = 'max_partitions_per_insert_block'`).Scan(&n)
	if err != nil {
		conn.Close()
		return nil, fail("read the server's settings", err)
	}
	s.unlimitedPartitions = n > 0
	return s, nil
}

// checkSchema is Open's check with Options.NoMigrate: the database exists on
// the server connected to and holds every migration of this version, and the
// tables a history write goes to (telemetry, telemetry_repeats: on a cluster
// the Distributed tables). Its errors name the address and the database. On a
// cluster it also lists the servers, as migrateCluster does (Drop).
func (s *Store) checkSchema(ctx context.Context) error {
	where := fmt.Sprintf("database %q at %v", s.opts.Database, s.opts.Addrs)
	var dbs uint64
	if err := s.conn.QueryRow(ctx, `SELECT count() FROM system.databases WHERE name = ?`, s.opts.Database).Scan(&dbs); err != nil {
		return fail("look for the "+where, err)
	}
	if dbs == 0 {
		return fmt.Errorf("clickhouse: no %s (check the address and the database name); nothing was created", where)
	}
	var tables []string
	rows, err := s.conn.Query(ctx, `SELECT name FROM system.tables WHERE database = ?`, s.opts.Database)
	if err != nil {
		return fail("list the tables of "+where, err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return fail("list the tables of "+where, err)
		}
		tables = append(tables, name)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fail("list the tables of "+where, err)
	}
	for _, t := range []string{"telemetry", "telemetry_repeats", "schema_migrations"} {
		if !slices.Contains(tables, t) {
			return fmt.Errorf("clickhouse: no table %s in %s: not a database a Sluice node uses (check the address and the database name); nothing was created", t, where)
		}
	}
	var applied uint32
	if err := s.conn.QueryRow(ctx, "SELECT max(version) FROM "+s.table("schema_migrations")).Scan(&applied); err != nil {
		return fail("read the schema version of "+where, err)
	}
	if latest := migrations[len(migrations)-1].version; int(applied) < latest {
		return fmt.Errorf("clickhouse: %s has schema version %d, this version of Sluice needs %d: start a node of this version first (it migrates the schema); nothing was changed", where, applied, latest)
	}
	if s.cluster != "" {
		return s.loadServers(ctx)
	}
	return nil
}

// compression maps Options.Compression onto the driver's setting.
func compression(name string) *ch.Compression {
	switch name {
	case "none":
		return nil
	case "zstd":
		return &ch.Compression{Method: ch.CompressionZSTD}
	}
	return &ch.Compression{Method: ch.CompressionLZ4}
}

// dial opens a connection pool to addrs (tried in order).
func (s *Store) dial(addrs []string, maxConns int) (driver.Conn, error) {
	o := &ch.Options{
		Protocol: ch.Native, // the HTTP interface of the driver fails on 18.16
		Addr:     addrs,
		Auth: ch.Auth{
			// The session starts in "default": the database may not exist yet.
			Database: "default",
			Username: s.opts.Username,
			Password: s.opts.Password,
		},
		DialTimeout:  s.opts.DialTimeout,
		MaxOpenConns: maxConns,
		MaxIdleConns: maxConns,
		Compression:  compression(s.opts.Compression),
	}
	if s.cluster != "" {
		o.Settings = clusterSettings
	}
	conn, err := ch.Open(o)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to clickhouse at %v: %w: %w", addrs, storage.ErrUnavailable, err)
	}
	return conn, nil
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
// pool) is storage.ErrUnavailable so callers know to retry, and so are the
// answers of a server that could not reach another shard of its cluster.
func fail(what string, err error) error {
	var ex *ch.Exception
	if errors.As(err, &ex) && !shardUnreachable[ex.Code] && !notTheRows[ex.Code] || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("clickhouse: cannot %s: %w", what, err)
	}
	return fmt.Errorf("clickhouse: cannot %s: %w: %w", what, storage.ErrUnavailable, err)
}

// shardUnreachable holds the error codes of a Distributed query or insert that
// could not reach a shard: SOCKET_TIMEOUT, NETWORK_ERROR (an insert),
// ALL_CONNECTION_TRIES_FAILED (a read).
var shardUnreachable = map[int32]bool{209: true, 210: true, 279: true}

// notTheRows holds the error codes of a server that refuses the work for a
// reason that is not in the rows and that passes, or that an operator mends:
// busy (TIMEOUT_EXCEEDED, TOO_MANY_SIMULTANEOUS_QUERIES, TOO_MANY_PARTS,
// MEMORY_LIMIT_EXCEEDED), read-only (READONLY, TABLE_IS_READ_ONLY), out of
// disk (NOT_ENOUGH_SPACE), without Sluice's tables (UNKNOWN_TABLE,
// UNKNOWN_DATABASE: a server newly in remote_servers that no node has
// migrated yet, which ClickHouse routes inserts to at once), or refusing the
// node's user (UNKNOWN_USER, WRONG_PASSWORD, ACCESS_DENIED,
// AUTHENTICATION_FAILED). They are unavailability, not a refusal of the rows:
// the spool retries them and never moves rows to its dead-letter file for them.
var notTheRows = map[int32]bool{
	159: true, 202: true, 252: true, 241: true,
	164: true, 242: true, 243: true,
	60: true, 81: true,
	192: true, 193: true, 497: true, 516: true,
}

// table qualifies a table name with the database.
func (s *Store) table(name string) string { return s.db + "." + name }

// Drop deletes the database with all its tables, on every server of the
// cluster: for tests and decommissioning.
func (s *Store) Drop(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	if s.cluster != "" {
		return s.onEveryServer(ctx, "drop database "+s.db, func(conn driver.Conn) error {
			if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+s.db); err != nil {
				return fail("drop database "+s.db, err)
			}
			return nil
		})
	}
	if err := s.conn.Exec(ctx, "DROP DATABASE IF EXISTS "+s.db); err != nil {
		return fail("drop database "+s.db, err)
	}
	return nil
}
