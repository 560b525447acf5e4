package notify

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// exercise runs the contract every Notifier meets: a publish on one node reaches
// the subscribers of the topic on every node, and only them, until they cancel.
func exercise(t *testing.T, a, b Notifier) {
	t.Helper()
	got := make(chan string, 100)
	cancelA := a.Subscribe("dev:1", func(m []byte) { got <- "a:" + string(m) })
	cancelB := b.Subscribe("dev:1", func(m []byte) { got <- "b:" + string(m) })
	b.Subscribe("dev:2", func(m []byte) { got <- "wrong topic:" + string(m) })

	if err := a.Publish(context.Background(), "dev:1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"a:x": true, "b:x": true}
	for len(want) > 0 {
		select {
		case m := <-got:
			if !want[m] {
				t.Fatalf("unexpected delivery %q", m)
			}
			delete(want, m)
		case <-time.After(10 * time.Second):
			t.Fatalf("not delivered: %v", want)
		}
	}
	cancelA()
	cancelB()
	cancelB() // twice is harmless
	b.Subscribe("dev:1", func(m []byte) { got <- "b2:" + string(m) })
	a.Publish(context.Background(), "dev:1", []byte("y"))
	select {
	case m := <-got:
		if m != "b2:y" {
			t.Fatalf("after cancel got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not delivered after resubscribe")
	}
}

func TestLocal(t *testing.T) {
	n := NewLocal()
	exercise(t, n, n)
}

func redisClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		if os.Getenv("SLUICE_REQUIRE_SERVICES") == "1" {
			t.Fatal("REDIS_ADDR is not set but SLUICE_REQUIRE_SERVICES=1")
		}
		t.Skip("REDIS_ADDR not set")
	}
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}, Password: os.Getenv("REDIS_PASSWORD")})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRedisTwoNodes runs the contract across two nodes' notifiers and checks that
// many local subscribers still make one Redis subscription per node.
func TestRedisTwoNodes(t *testing.T) {
	c := redisClient(t)
	prefix := fmt.Sprintf("sluice-test-%d:", time.Now().UnixNano())
	a, err := NewRedis(context.Background(), c, prefix, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var resets atomic.Int32
	b, err := NewRedis(context.Background(), redisClient(t), prefix, nil, func() { resets.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	exercise(t, a, b)

	before, err := c.PubSubNumPat(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		defer b.Subscribe(fmt.Sprintf("dev:%d", i), func([]byte) {})()
	}
	after, _ := c.PubSubNumPat(context.Background()).Result()
	if after != before {
		t.Fatalf("1000 local subscribers changed the Redis pattern count %d -> %d", before, after)
	}
}
