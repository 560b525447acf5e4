package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/testenv"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/embedded"
	"github.com/sluice-iot/sluice/storage/split"
	"github.com/sluice-iot/sluice/storage/storagetest"
)

// addr returns REDIS_ADDR (see internal/testenv).
func addr(tb testing.TB) string { return testenv.Service(tb, "REDIS_ADDR")[0] }

// clusterAddrs returns REDIS_CLUSTER_ADDRS split at commas (see internal/testenv).
func clusterAddrs(tb testing.TB) []string {
	return strings.Split(testenv.Service(tb, "REDIS_CLUSTER_ADDRS")[0], ",")
}

// openTest opens a Store on a single Redis (REDIS_ADDR) on a fresh key prefix
// whose keys are deleted when the test ends.
func openTest(tb testing.TB) *Store {
	tb.Helper()
	return openWith(tb, Options{Addrs: []string{addr(tb)}})
}

// openClusterTest is openTest on the Redis Cluster of REDIS_CLUSTER_ADDRS.
func openClusterTest(tb testing.TB) *Store {
	tb.Helper()
	return openWith(tb, Options{Addrs: clusterAddrs(tb), Cluster: true})
}

// testPrefix returns a fresh key prefix.
func testPrefix() string {
	var b [6]byte
	rand.Read(b[:])
	return "sluicetest:" + hex.EncodeToString(b[:]) + ":"
}

// openWith opens a Store with opts on a fresh key prefix (unless opts has one)
// and drops its keys when the test ends.
func openWith(tb testing.TB, opts Options) *Store {
	tb.Helper()
	if opts.Prefix == "" {
		opts.Prefix = testPrefix()
	}
	s, err := Open(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx := context.Background()
		defer s.Close()
		if s.closed.Load() {
			// The test closed it; clean up through a new one.
			if s, err = Open(ctx, opts); err != nil {
				tb.Errorf("delete test keys: %v", err)
				return
			}
		}
		if err := s.Drop(ctx); err != nil {
			tb.Errorf("delete test keys: %v", err)
		}
	})
	return s
}

// TestConformance runs the suite with Redis entities and attributes; telemetry
// comes from the embedded back end (storage/split runs ClickHouse with Redis).
func TestConformance(t *testing.T) {
	addr(t)
	conformance(t, openTest)
}

// TestClusterConformance is TestConformance on a Redis Cluster.
func TestClusterConformance(t *testing.T) {
	clusterAddrs(t)
	conformance(t, openClusterTest)
}

func conformance(t *testing.T, open func(testing.TB) *Store) {
	storagetest.Run(t, func(t *testing.T) storage.Backend {
		tel, err := embedded.Open(t.TempDir(), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tel.Close() })
		return split.New(tel, open(t))
	})
}

func TestBadPrefix(t *testing.T) {
	if _, err := Open(t.Context(), Options{Prefix: "a{b}"}); err == nil {
		t.Fatal("Open accepted a prefix with braces")
	}
}

func TestClusterDB(t *testing.T) {
	if _, err := Open(t.Context(), Options{Cluster: true, DB: 1}); err == nil {
		t.Fatal("Open accepted a database other than 0 for a cluster")
	}
	if _, err := Open(t.Context(), Options{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, DB: 1}); err == nil {
		t.Fatal("Open accepted a database other than 0 for a cluster")
	}
}

func TestClosed(t *testing.T) {
	s := openTest(t)
	s.Close()
	err := s.SaveAttributes(t.Context(), uuid.New(), storage.ServerScope, []kv.Entry{{Ts: 1, Key: "k", Value: kv.LongValue(1)}})
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("SaveAttributes after Close: got %v, want ErrUnavailable", err)
	}
}

func TestValueRoundTrip(t *testing.T) {
	f := func(e kv.Entry) {
		t.Helper()
		got, err := decodeValue(e.Key, string(encodeValue(e)))
		if err != nil {
			t.Fatal(err)
		}
		if got != e {
			t.Fatalf("got %+v, want %+v", got, e)
		}
	}
	f(kv.Entry{Ts: -1, Key: "b", Value: kv.BoolValue(true)})
	f(kv.Entry{Ts: 1 << 62, Key: "l", Value: kv.LongValue(-42)})
	f(kv.Entry{Ts: 0, Key: "d", Value: kv.DoubleValue(-0.5)})
	f(kv.Entry{Ts: 5, Key: "s", Value: kv.StringValue("")})
	f(kv.Entry{Ts: 5, Key: "j", Value: kv.JSONValue(`{"a":1}`)})
	if _, err := decodeValue("x", "short"); err == nil {
		t.Fatal("decoded a truncated value")
	}
}
