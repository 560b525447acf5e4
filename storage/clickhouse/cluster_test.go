package clickhouse

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/testenv"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/embedded"
	"github.com/sluice-iot/sluice/storage/split"
	"github.com/sluice-iot/sluice/storage/storagetest"
)

// testCluster returns the servers (CLICKHOUSE_CLUSTER_ADDRS, split at commas)
// and the name (CLICKHOUSE_TEST_CLUSTER) of the two-shard test cluster that
// scripts/services.sh starts (see internal/testenv).
func testCluster(tb testing.TB) ([]string, string) {
	env := testenv.Service(tb, "CLICKHOUSE_CLUSTER_ADDRS", "CLICKHOUSE_TEST_CLUSTER")
	return strings.Split(env[0], ","), env[1]
}

// openClusterTest opens a Store sharded over the test cluster on a fresh
// database, dropped from every server when the test ends.
func openClusterTest(tb testing.TB) *Store {
	tb.Helper()
	addrs, cluster := testCluster(tb)
	return openFresh(tb, Options{Addrs: addrs, Cluster: cluster})
}

// TestClusterConformance runs the suite with telemetry sharded over the test
// cluster; entities and attributes come from the embedded back end.
func TestClusterConformance(t *testing.T) {
	testCluster(t)
	storagetest.Run(t, openClusterBackend)
}

// openClusterBackend is the cluster telemetry store with embedded state.
func openClusterBackend(t *testing.T) storage.Backend {
	state, err := embedded.Open(t.TempDir(), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := split.New(openClusterTest(t), state)
	t.Cleanup(func() { state.Close() })
	return b
}

// TestClusterReport runs the report conformance suite on the cluster: the report
// query reads the Distributed tables (with FINAL: system.parts lists no parts of
// a Distributed table, so no partition counts as merged).
func TestClusterReport(t *testing.T) {
	testCluster(t)
	storagetest.RunReport(t, openClusterBackend)
}

// TestClusterShardsByDevice checks that writes reach both shards, each
// device's rows (history, latest values, tombstones) on one shard only.
func TestClusterShardsByDevice(t *testing.T) {
	s := openClusterTest(t)
	if len(s.servers) != 2 {
		t.Fatalf("servers of the test cluster: %v, want two", s.servers)
	}
	tenant := uuid.New()
	var rows []storage.Row
	for range 32 {
		device := uuid.New()
		for ts := int64(1); ts <= 3; ts++ {
			rows = append(rows, storage.Row{TenantID: tenant, EntityID: device,
				Entry: kv.Entry{Ts: ts, Key: "temperature", Value: kv.LongValue(ts)}})
		}
		if err := s.DeleteSeries(t.Context(), storage.DeleteQuery{EntityID: device, Keys: []string{"temperature"}, StartTs: 100, EndTs: 200}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Write(t.Context(), rows); err != nil {
		t.Fatal(err)
	}

	// Every device is on exactly one shard, in every sharded table.
	for _, table := range []string{"telemetry", "telemetry_latest", "telemetry_deletes"} {
		seen := map[string]int{}
		err := s.onEveryServer(t.Context(), "list devices", func(conn driver.Conn) error {
			r, err := conn.Query(t.Context(), "SELECT DISTINCT toString(entity_id) FROM "+s.table(table+localSuffix))
			if err != nil {
				return err
			}
			defer r.Close()
			n := 0
			for ; r.Next(); n++ {
				var id string
				if err := r.Scan(&id); err != nil {
					return err
				}
				seen[id]++
			}
			if n == 0 {
				t.Errorf("%s: a shard got none of 32 devices", table)
			}
			return r.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) != 32 {
			t.Errorf("%s: %d devices on the shards, want 32", table, len(seen))
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("%s: device %s on %d shards", table, id, n)
			}
		}
	}
}

func TestClusterMigrationsAreIdempotent(t *testing.T) {
	s := openClusterTest(t)
	again, err := Open(t.Context(), s.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	err = again.onEveryServer(t.Context(), "count migrations", func(conn driver.Conn) error {
		var n uint64
		if err := conn.QueryRow(t.Context(), "SELECT count() FROM "+again.table("schema_migrations")).Scan(&n); err != nil {
			return err
		}
		if n != uint64(len(migrations)) {
			t.Errorf("schema_migrations has %d rows, want %d", n, len(migrations))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestClusterUnknown(t *testing.T) {
	addrs, _ := testCluster(t)
	f := func(cluster, want string) {
		t.Helper()
		s, err := Open(t.Context(), Options{Addrs: addrs, Database: "sluice_test_never_created", Cluster: cluster})
		if err == nil {
			s.Close()
			t.Fatalf("Open with cluster %q: no error", cluster)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("Open with cluster %q: %v, want it to say %q", cluster, err, want)
		}
	}
	f("no_such_cluster", "not in remote_servers")
	f("bad'name", "cluster name")
}

func TestFailClassifiesShardErrors(t *testing.T) {
	f := func(err error, unavailable bool) {
		t.Helper()
		if got := errors.Is(fail("read", err), storage.ErrUnavailable); got != unavailable {
			t.Fatalf("fail(%v) unavailable = %v, want %v", err, got, unavailable)
		}
	}
	f(&ch.Exception{Code: 279, Message: "All connection tries failed"}, true)
	f(&ch.Exception{Code: 210, Message: "Connection refused (127.0.0.1:9001)"}, true)
	f(&ch.Exception{Code: 252, Message: "Too many parts"}, true) // busy: retried, never dead-lettered
	f(&ch.Exception{Code: 242, Message: "Table is in readonly mode"}, true)
	f(&ch.Exception{Code: 60, Message: "Received from 127.0.0.1:9001. DB::Exception: Table sluice.telemetry_local doesn't exist."}, true)
	f(&ch.Exception{Code: 60, Message: "Table sluice.telemetry doesn't exist."}, true) // this server's own: mended by a restart
	f(&ch.Exception{Code: 497, Message: "Not enough privileges"}, true)
	f(&ch.Exception{Code: 241, Message: "Memory limit (total) exceeded"}, true)
	f(&ch.Exception{Code: 62, Message: "Syntax error"}, false)
	f(context.Canceled, false)
	f(io.EOF, true)
}
