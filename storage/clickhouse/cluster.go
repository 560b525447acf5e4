package clickhouse

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// A cluster spreads the tables over the shards of Options.Cluster, a cluster of
// the servers' remote_servers configuration. Every server of the cluster gets,
// from the migrations, the local tables (<table>_local, the engines of schema.go)
// and Distributed tables named as on a single server, so any server can take
// the queries and the SQL of reads and writes does not change.
//
// Rows are sharded by device (shardingKey): ReplacingMergeTree replaces rows,
// and FINAL collapses them, only within one server, so every version of a
// point, and of a latest value, must land on the same shard. A device's
// tombstones go with its rows; reads find them through the Distributed table.
//
// The migrations do not use ON CLUSTER, which needs ZooKeeper: Sluice reads the
// servers of the cluster from system.clusters and runs them on each itself.
//
// On 18.16 a query with FINAL and ORDER BY through a Distributed table fails
// ("Cannot find column key in source stream") unless it names every column of
// the table's ORDER BY key; the reads here do (each names the entity, the key
// and the ts), and new queries with FINAL must too.

// localSuffix names the local table behind each Distributed table.
const localSuffix = "_local"

// shardingKey picks a row's shard from its device. It hashes the text form:
// 18.16 cannot hash a UUID ("Unexpected type UUID of argument of function
// cityHash64"), and the text form hashes the same on every version, which
// keeps a device on its shard across upgrades.
const shardingKey = "cityHash64(toString(entity_id))"

// clusterSettings go with every query on a cluster. insert_distributed_sync
// makes an insert into a Distributed table return once every shard has written
// its rows (the default queues them on the receiving server and sends them
// later): the spool drops rows only after that, so an acknowledged point is
// never only in a queue of a server that may lose it.
var clusterSettings = ch.Settings{"insert_distributed_sync": 1}

// clusterName is what remote_servers accepts as an element name, minus the
// characters that would need quoting in SQL.
var clusterName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// distributed is the engine clause of a Distributed table over table's local
// tables. The database is named: an empty one would mean each replica's
// default_database.
func (s *Store) distributed(table string) string {
	return fmt.Sprintf("ENGINE = Distributed('%s', '%s', '%s', %s)",
		s.cluster, s.opts.Database, table+localSuffix, shardingKey)
}

// migrateCluster runs the migrations on every server of the cluster, so that a
// server added to remote_servers gets its tables on the next start of a node.
// ClickHouse routes to such a server as soon as it rereads its configuration;
// until a node has migrated it, inserts routed there are refused as
// unavailable (notTheRows) and their rows wait in the spool.
func (s *Store) migrateCluster(ctx context.Context) error {
	if err := s.loadServers(ctx); err != nil {
		return err
	}
	return s.onEveryServer(ctx, "migrate", func(conn driver.Conn) error { return s.migrate(ctx, conn) })
}

// loadServers reads the servers of the cluster into s.servers.
func (s *Store) loadServers(ctx context.Context) error {
	servers, err := clusterServers(ctx, s.conn, s.cluster)
	if err != nil {
		return err
	}
	if len(servers) == 0 {
		return fmt.Errorf("clickhouse: cluster %q is not in remote_servers of the server at %v", s.cluster, s.opts.Addrs)
	}
	s.servers = servers
	return nil
}

// clusterServers lists host:port of every replica of every shard of cluster, as
// remote_servers of conn's server names them.
func clusterServers(ctx context.Context, conn driver.Conn, cluster string) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT host_name, port FROM system.clusters
		WHERE cluster = ? ORDER BY shard_num, replica_num`, cluster)
	if err != nil {
		return nil, fail("list the servers of cluster "+cluster, err)
	}
	defer rows.Close()
	var servers []string
	for rows.Next() {
		var (
			host string
			port uint16
		)
		if err := rows.Scan(&host, &port); err != nil {
			return nil, fail("list the servers of cluster "+cluster, err)
		}
		servers = append(servers, net.JoinHostPort(host, strconv.Itoa(int(port))))
	}
	if err := rows.Err(); err != nil {
		return nil, fail("list the servers of cluster "+cluster, err)
	}
	return servers, nil
}

// onEveryServer runs f over a connection of its own to each server of the
// cluster in turn, stopping at the first failure.
func (s *Store) onEveryServer(ctx context.Context, what string, f func(driver.Conn) error) error {
	for _, addr := range s.servers {
		conn, err := s.dial([]string{addr}, 1)
		if err != nil {
			return err
		}
		err = f(conn)
		conn.Close()
		if err != nil {
			return fmt.Errorf("clickhouse: cannot %s on %s of cluster %s: %w", what, addr, s.cluster, err)
		}
	}
	return nil
}
