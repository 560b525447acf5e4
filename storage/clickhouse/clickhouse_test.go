package clickhouse

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/testenv"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/embedded"
	"github.com/sluice-iot/sluice/storage/split"
	"github.com/sluice-iot/sluice/storage/storagetest"
)

// addr returns CLICKHOUSE_ADDR (see internal/testenv).
func addr(tb testing.TB) string { return testenv.Service(tb, "CLICKHOUSE_ADDR")[0] }

// OpenTest opens a Store on a fresh database, dropped when the test ends.
func OpenTest(tb testing.TB) *Store {
	tb.Helper()
	return openFresh(tb, Options{Addrs: []string{addr(tb)}})
}

// openFresh opens a Store with opts on a fresh database (any Database in opts is
// replaced), dropped when the test ends — from every server on a cluster.
func openFresh(tb testing.TB, opts Options) *Store {
	tb.Helper()
	var b [6]byte
	rand.Read(b[:])
	opts.Database = "sluice_test_" + hex.EncodeToString(b[:])
	s, err := Open(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		defer s.Close()
		if s.closed.Load() {
			// The test closed it; drop through a new one.
			if s, err = Open(context.Background(), opts); err != nil {
				tb.Errorf("drop test database: %v", err)
				return
			}
		}
		if err := s.Drop(context.Background()); err != nil {
			tb.Errorf("drop test database: %v", err)
		}
	})
	return s
}

// TestConformance runs the suite with ClickHouse telemetry; entities and
// attributes come from the embedded back end.
func TestConformance(t *testing.T) {
	addr(t)
	storagetest.Run(t, func(t *testing.T) storage.Backend {
		state, err := embedded.Open(t.TempDir(), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		b := split.New(OpenTest(t), state)
		t.Cleanup(func() { state.Close() })
		return b
	})
}

func TestMigrationsAreIdempotent(t *testing.T) {
	s := OpenTest(t)
	// A second Open of the same database applies nothing and fails on nothing.
	again, err := Open(t.Context(), Options{Addrs: []string{addr(t)}, Database: s.db[1 : len(s.db)-1]})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	var n uint64
	if err := again.conn.QueryRow(t.Context(), "SELECT count() FROM "+again.table("schema_migrations")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != uint64(len(migrations)) {
		t.Fatalf("schema_migrations has %d rows, want %d", n, len(migrations))
	}
}

func TestClosed(t *testing.T) {
	s := OpenTest(t)
	s.Close()
	err := s.Write(t.Context(), []storage.Row{{EntityID: uuid.New(), Entry: kv.Entry{Ts: 1, Key: "k", Value: kv.LongValue(1)}}})
	if err == nil || !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Write after Close: got %v, want ErrUnavailable", err)
	}
}

// TestCompression: every Options.Compression the server is sent with stores and
// reads back the same points.
func TestCompression(t *testing.T) {
	for _, c := range []string{"lz4", "zstd", "none"} {
		t.Run(c, func(t *testing.T) {
			s := openFresh(t, Options{Addrs: []string{addr(t)}, Compression: c})
			id := uuid.New()
			var rows []storage.Row
			for i := range 1000 {
				rows = append(rows, storage.Row{EntityID: id, Entry: kv.Entry{Ts: int64(i), Key: "k", Value: kv.StringValue(fmt.Sprint("v", i))}})
			}
			if err := s.WriteHistory(t.Context(), rows, nil, nil); err != nil {
				t.Fatal(err)
			}
			got, err := s.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "k", StartTs: 0, EndTs: 1000, Limit: 2000})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1000 {
				t.Fatalf("read %d points back, want 1000", len(got))
			}
			for _, e := range got {
				if want := fmt.Sprint("v", e.Ts); e.Value.Str != want {
					t.Fatalf("point %d reads %q, want %q", e.Ts, e.Value.Str, want)
				}
			}
		})
	}
}

// BenchmarkWrite inserts batches of 10,000, 50,000 and 100,000 rows (the spool's
// SLUICE_SPOOL_BATCH_ROWS) from 100 devices; rows/s is what one delivery lane
// gets into ClickHouse, merges of the earlier inserts included.
func BenchmarkWrite(b *testing.B) {
	// Write (history and latest candidates, every day marked) as the tests and a
	// ClickHouse-only back end use it; WriteHistory of new points as the spool
	// delivers in-order telemetry in production.
	for _, method := range []string{"Write", "WriteHistory"} {
		for _, batch := range []int{10_000, 50_000, 100_000} {
			b.Run(fmt.Sprintf("%s/rows=%d", method, batch), func(b *testing.B) {
				s := OpenTest(b)
				rows := make([]storage.Row, batch)
				fresh := make([]bool, batch)
				tenant := uuid.New()
				devices := make([]uuid.UUID, 100)
				for i := range devices {
					devices[i] = uuid.New()
				}
				ts := int64(1_700_000_000_000)
				b.ReportAllocs()
				for b.Loop() {
					for i := range rows {
						ts++
						rows[i] = storage.Row{TenantID: tenant, EntityID: devices[i%len(devices)],
							Entry: kv.Entry{Ts: ts, Key: "temperature", Value: kv.DoubleValue(float64(i) / 10)}}
					}
					var err error
					if method == "Write" {
						err = s.Write(b.Context(), rows)
					} else {
						err = s.WriteHistory(b.Context(), rows, fresh, nil)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}

// TestLargeWriteIsOnePart: a Write larger than insertBlockRows goes to the server
// in several blocks of one INSERT, which ClickHouse squashes into one part per
// server (a part per block would multiply the merges), and every row arrives; on
// one server and on the two-shard cluster.
func TestLargeWriteIsOnePart(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(testing.TB) *Store
	}{{"server", OpenTest}, {"cluster", openClusterTest}} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.open(t)
			const n = 2*insertBlockRows + 123
			rows := make([]storage.Row, n)
			tenant := uuid.New()
			devices := make([]uuid.UUID, 16) // on the cluster, some on each shard
			for i := range devices {
				devices[i] = uuid.New()
			}
			for i := range rows {
				rows[i] = storage.Row{TenantID: tenant, EntityID: devices[i%len(devices)],
					Entry: kv.Entry{Ts: 1_700_000_000_000 + int64(i), Key: "k", Value: kv.LongValue(int64(i))}}
			}
			if err := s.Write(t.Context(), rows); err != nil {
				t.Fatal(err)
			}
			var total uint64
			count := func(conn driver.Conn, table string) error {
				var parts, rows uint64
				if err := conn.QueryRow(t.Context(), "SELECT count(), sum(rows) FROM system.parts WHERE database = ? AND table = ? AND active",
					s.db[1:len(s.db)-1], table).Scan(&parts, &rows); err != nil {
					return err
				}
				if parts != 1 {
					t.Errorf("%d rows in %d parts on a server, want 1 part", rows, parts)
				}
				total += rows
				return nil
			}
			var err error
			if s.cluster == "" {
				err = count(s.conn, "telemetry")
			} else {
				err = s.onEveryServer(t.Context(), "count parts", func(conn driver.Conn) error {
					return count(conn, "telemetry"+localSuffix)
				})
			}
			if err != nil {
				t.Fatal(err)
			}
			if total != n {
				t.Fatalf("%d rows stored, want %d", total, n)
			}
		})
	}
}
