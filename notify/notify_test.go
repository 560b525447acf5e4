package notify

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-iot/sluice/internal/testenv"
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
	addr := testenv.Service(t, "REDIS_ADDR")[0]
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}, Password: os.Getenv("REDIS_PASSWORD")})
	t.Cleanup(func() { c.Close() })
	return c
}

// clusterClient returns a client of the Redis Cluster of REDIS_CLUSTER_ADDRS.
func clusterClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	addrs := testenv.Service(t, "REDIS_CLUSTER_ADDRS")[0]
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(addrs, ","), IsClusterMode: true, Password: os.Getenv("REDIS_PASSWORD")})
	t.Cleanup(func() { c.Close() })
	return c
}

// numPat is the number of pattern subscriptions, summed over every master of a
// cluster: PUBSUB NUMPAT answers for one server.
func numPat(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		n, err := c.PubSubNumPat(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var total atomic.Int64
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		n, err := m.PubSubNumPat(ctx).Result()
		total.Add(n)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return total.Load()
}

// TestRedisTwoNodes runs the contract across two nodes' notifiers and checks that
// many local subscribers still make one Redis subscription per node.
func TestRedisTwoNodes(t *testing.T) { twoNodes(t, redisClient) }

// TestRedisClusterTwoNodes is TestRedisTwoNodes on a Redis Cluster, where each
// node's one pattern subscription lives on one master (the one of the pattern's
// slot) and PUBLISH reaches it because a cluster broadcasts it to every node.
func TestRedisClusterTwoNodes(t *testing.T) {
	c := twoNodes(t, clusterClient)
	// Publish on each master directly: the subscriptions live on one of them, so
	// the others' messages arrive only through the cluster's broadcast.
	prefix := fmt.Sprintf("sluice-test-%d:", time.Now().UnixNano())
	a, err := NewRedis(context.Background(), c, prefix, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewRedis(context.Background(), clusterClient(t), prefix, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := make(chan string, 100)
	defer a.Subscribe("t", func(m []byte) { got <- "a:" + string(m) })()
	defer b.Subscribe("t", func(m []byte) { got <- "b:" + string(m) })()
	want := make(map[string]bool)
	var mu sync.Mutex
	err = c.(*redis.ClusterClient).ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		addr := m.Options().Addr
		mu.Lock()
		want["a:"+addr], want["b:"+addr] = true, true
		mu.Unlock()
		return m.Publish(ctx, prefix+"t", addr).Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 6 {
		t.Fatalf("published on %d masters, want 3", len(want)/2)
	}
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
}

func twoNodes(t *testing.T, newClient func(*testing.T) redis.UniversalClient) redis.UniversalClient {
	c := newClient(t)
	prefix := fmt.Sprintf("sluice-test-%d:", time.Now().UnixNano())
	a, err := NewRedis(context.Background(), c, prefix, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var resets atomic.Int32
	b, err := NewRedis(context.Background(), newClient(t), prefix, nil, func() { resets.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	exercise(t, a, b)

	before := numPat(t, c)
	for i := range 1000 {
		defer b.Subscribe(fmt.Sprintf("dev:%d", i), func([]byte) {})()
	}
	if after := numPat(t, c); after != before {
		t.Fatalf("1000 local subscribers changed the Redis pattern count %d -> %d", before, after)
	}
	return c
}
