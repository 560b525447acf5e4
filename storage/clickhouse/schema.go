package clickhouse

import (
	"context"
	"fmt"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The tables, created by the migrations below:
//
// telemetry holds history, one row per written point, with the value in the
// column of its type (type is kv.Type; string and JSON text in separate String
// columns; JSON is never a ClickHouse JSON type). It is a ReplacingMergeTree
// ordered by (entity_id, key, ts) with the write version ver: a point written
// twice is two rows until a merge keeps the higher ver, so every read uses FINAL,
// which applies the same rule at read time to the key ranges the query selects.
// (ClickHouse 18.16 de-duplicates inserts only for Replicated tables, and
// argMax/GROUP BY would need every value column wrapped and cannot feed LIMIT.)
// The order starts with the entity, not the tenant: every read names an entity
// and none names a tenant, and the primary index serves only a prefix. Partitions
// are months of ts so retention can DROP PARTITION.
//
// telemetry_latest holds candidates for the latest value: each Write inserts the
// newest row it has per (entity, key). It is a ReplacingMergeTree ordered by
// (entity_id, key) whose version lver is ts mapped order-preserving onto UInt64,
// so merges and FINAL keep the newest ts; on equal lver ReplacingMergeTree keeps
// the row inserted last, which is the contract's "later write wins". It is not
// partitioned: rows of one key must meet in one partition to replace each other.
// In production latest values live in Redis and the spool delivers with
// WriteHistory, which leaves this table out.
//
// telemetry_deletes holds tombstones. 18.16 has ALTER TABLE … DELETE, but a
// mutation is asynchronous (no mutations_sync before 19.x: polling
// system.mutations took 0.2–4.4 s here) and rewrites whole parts, so deletes
// write a tombstone instead and reads leave out rows older than it (ver below the
// tombstone's ver) in its range. A tombstone with all_keys covers every key and
// ts (device deletion). A tombstone with latest > 0 also retires the latest value:
// for such a key telemetry_latest cannot be trusted (a merge may already have
// dropped a newer write with a smaller ts in favour of the deleted row), so its
// latest value comes from telemetry instead: the newest point written after the
// tombstone (latest = 1, DeleteLatest) or the newest remaining point (latest = 2,
// RewriteLatest). Tombstones stay until an operator compacts them (a mutation
// that deletes the covered rows, then drops the tombstones); only keys with one
// pay for the slower latest read.
//
// telemetry_repeats lists the days (ts / 86,400,000, per entity) whose history
// may hold two copies of a point, the only rows reports must read with FINAL
// (18.16 merges a FINAL read on one core: most of a report's time). A point gets
// a second row when it is written again (same entity, key and ts) or when a
// delivery is repeated; WriteHistory marks the days of the rows its caller says
// may be such copies before it inserts them, Write marks the days of all of its
// rows. Copies of a point share its entity and day, so splitting a read by
// (entity, day) never separates them. Marks are never removed.
//
// On a cluster (Options.Cluster) each of these tables is, on every server of the
// cluster, a local table of the same layout named <table>_local plus a Distributed
// table <table> over the local tables of all shards (see cluster.go). Every
// query names <table>, so the SQL is the same on a single server and a cluster.
//
// A migration creates {table}, named by table, or alters existing tables; one
// that alters a sharded table must alter both {db}.<table>_local and
// {db}.<table> on a cluster (check s.cluster), as ClickHouse does not forward
// ALTER through a Distributed table.
var migrations = []struct {
	version int
	name    string
	table   string // the table the migration creates, sharded on a cluster
	sql     string
}{
	{1, "telemetry history", "telemetry", `CREATE TABLE IF NOT EXISTS {table} (
		tenant_id UUID,
		entity_id UUID,
		key String,
		ts Int64,
		ver UInt64,
		type UInt8,
		bool_v UInt8,
		long_v Int64,
		dbl_v Float64,
		str_v String,
		json_v String
	) ENGINE = ReplacingMergeTree(ver)
	PARTITION BY toYYYYMM(toDateTime(intDiv(ts, 1000)))
	ORDER BY (entity_id, key, ts)`},
	{2, "latest values", "telemetry_latest", `CREATE TABLE IF NOT EXISTS {table} (
		tenant_id UUID,
		entity_id UUID,
		key String,
		ts Int64,
		lver UInt64,
		ver UInt64,
		type UInt8,
		bool_v UInt8,
		long_v Int64,
		dbl_v Float64,
		str_v String,
		json_v String
	) ENGINE = ReplacingMergeTree(lver)
	ORDER BY (entity_id, key)`},
	{3, "delete tombstones", "telemetry_deletes", `CREATE TABLE IF NOT EXISTS {table} (
		entity_id UUID,
		key String,
		all_keys UInt8,
		start_ts Int64,
		end_ts Int64,
		ver UInt64,
		latest UInt8
	) ENGINE = MergeTree
	ORDER BY (entity_id, key)`},
	{4, "days that may hold copies", "telemetry_repeats", `CREATE TABLE IF NOT EXISTS {table} (
		entity_id UUID,
		day Int64
	) ENGINE = ReplacingMergeTree
	ORDER BY (entity_id, day)`},
	// History written before migration 4 has no marks: every day of it may hold
	// copies. On a cluster this runs on each server over its own shard.
	{5, "mark the days of earlier history", "", `INSERT INTO {local:telemetry_repeats} (entity_id, day)
		SELECT DISTINCT entity_id, intDiv(ts, 86400000) FROM {local:telemetry}`},
}

// migrate applies the migrations newer than the highest version recorded in
// schema_migrations, in order, recording each, on conn's server. Every statement
// is idempotent, so two nodes starting at once at worst apply one twice. On a
// cluster it runs once per server (see cluster.go), each with its own
// schema_migrations, so a server added later catches up on the next start.
func (s *Store) migrate(ctx context.Context, conn driver.Conn) error {
	if err := conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+s.db); err != nil {
		return fail("create database "+s.db, err)
	}
	if err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.table("schema_migrations")+` (
		version UInt32,
		name String,
		applied_at DateTime DEFAULT now()
	) ENGINE = MergeTree ORDER BY version`); err != nil {
		return fail("create schema_migrations", err)
	}
	var applied uint32
	if err := conn.QueryRow(ctx, "SELECT max(version) FROM "+s.table("schema_migrations")).Scan(&applied); err != nil {
		return fail("read schema version", err)
	}
	for _, m := range migrations {
		if uint32(m.version) <= applied {
			continue
		}
		for _, stmt := range s.statements(m.table, m.sql) {
			if err := conn.Exec(ctx, stmt); err != nil {
				return fail(fmt.Sprintf("apply migration %d (%s)", m.version, m.name), err)
			}
		}
		if err := insertRow(ctx, conn, s.table("schema_migrations"), " (version, name)", uint32(m.version), m.name); err != nil {
			return fail(fmt.Sprintf("record migration %d", m.version), err)
		}
	}
	return nil
}

// statements expands a migration: on a single server {table} is the table itself;
// on a cluster it is the local table, followed by the Distributed table over it.
func (s *Store) statements(table, sql string) []string {
	sql = strings.ReplaceAll(sql, "{db}", s.db)
	for _, t := range []string{"telemetry", "telemetry_repeats"} {
		local := s.table(t)
		if s.cluster != "" {
			local = s.table(t + localSuffix)
		}
		sql = strings.ReplaceAll(sql, "{local:"+t+"}", local)
	}
	if table == "" {
		return []string{sql}
	}
	if s.cluster == "" {
		return []string{strings.ReplaceAll(sql, "{table}", s.table(table))}
	}
	local := s.table(table + localSuffix)
	return []string{
		strings.ReplaceAll(sql, "{table}", local),
		"CREATE TABLE IF NOT EXISTS " + s.table(table) + " AS " + local + " " + s.distributed(table),
	}
}
