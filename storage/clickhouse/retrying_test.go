package clickhouse

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// TestOpenRetrying: a ClickHouse that cannot be reached at start is
// unavailability on every call, not a failed start; once it can be, the
// Store opens by itself and serves.
func TestOpenRetrying(t *testing.T) {
	target := addr(t)
	// A port nobody listens on yet; the proxy takes it later.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().String()
	ln.Close()

	var b [6]byte
	rand.Read(b[:])
	opts := Options{Addrs: []string{port}, Database: "sluice_test_" + hex.EncodeToString(b[:]), DialTimeout: time.Second}
	r, err := OpenRetrying(context.Background(), opts, slog.New(slog.DiscardHandler), 50*time.Millisecond)
	if err != nil {
		t.Fatalf("start without ClickHouse: %v", err)
	}
	defer r.Close()
	id := uuid.New()
	rows := []storage.Row{{EntityID: id, Entry: kv.Entry{Ts: 1, Key: "k", Value: kv.LongValue(7)}}}
	if err := r.WriteHistory(t.Context(), rows, nil, nil); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("write before ClickHouse is reached: %v", err)
	}
	if _, err := r.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "k", EndTs: 10}); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("read before ClickHouse is reached: %v", err)
	}

	// ClickHouse appears on the port.
	ln, err = net.Listen("tcp", port)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err) // not a failure of the code under test
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !r.Open() {
		if time.Now().After(deadline) {
			t.Fatal("not open 30 s after ClickHouse appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer func() {
		if s, err := r.get(); err == nil {
			s.Drop(context.Background())
		}
	}()
	if err := r.WriteHistory(t.Context(), rows, nil, nil); err != nil {
		t.Fatalf("write once reached: %v", err)
	}
	got, err := r.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "k", EndTs: 10})
	if err != nil || len(got) != 1 {
		t.Fatalf("read once reached: %v %v", got, err)
	}
}

// TestOpenRetryingRefusesBadConfig: what waiting cannot mend fails the start.
func TestOpenRetryingRefusesBadConfig(t *testing.T) {
	_, err := OpenRetrying(context.Background(), Options{Addrs: []string{addr(t)}, Database: "bad-name"}, slog.New(slog.DiscardHandler), time.Second)
	if err == nil || errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("bad database name: %v", err)
	}
}
