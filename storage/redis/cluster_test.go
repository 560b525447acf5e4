package redis

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

func TestSharedValue(t *testing.T) { testSharedValue(t, Options{Addrs: []string{addr(t)}}) }
func TestClusterSharedValue(t *testing.T) {
	testSharedValue(t, Options{Addrs: clusterAddrs(t), Cluster: true})
}

// testSharedValue checks that the first value stored wins, for this store and for
// a second one on the same prefix (another node), also when they race.
func testSharedValue(t *testing.T, opts Options) {
	ctx := t.Context()
	s := openWith(t, opts)
	opts.Prefix = s.Prefix()
	other, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	const n = 8
	got := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			st := s
			if i%2 == 1 {
				st = other
			}
			got[i], errs[i] = st.SharedValue(ctx, "key", func() []byte { return fmt.Appendf(nil, "value %d", i) })
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !bytes.Equal(got[i], got[0]) {
			t.Fatalf("SharedValue returned %q and %q", got[0], got[i])
		}
	}
	again, err := other.SharedValue(ctx, "key", func() []byte { return []byte("late") })
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, got[0]) {
		t.Fatalf("a later SharedValue returned %q, want %q", again, got[0])
	}
	fresh, err := s.SharedValue(ctx, "other", func() []byte { return []byte("o") })
	if err != nil || string(fresh) != "o" {
		t.Fatalf("SharedValue of another name: %q, %v", fresh, err)
	}
}

// TestClusterSpread writes entities, attributes and latest values of enough kinds
// and entities that every master holds some, reads them back (one UpdateLatest
// pipeline spans all masters), then checks that Drop empties every master.
func TestClusterSpread(t *testing.T) {
	s := openClusterTest(t)
	ctx := t.Context()
	const n = 60
	var rows []storage.Row
	entities := make([]uuid.UUID, n)
	owner := uuid.New()
	for i := range entities {
		entities[i] = uuid.New()
		kind := fmt.Sprintf("kind%d", i)
		if err := s.Put(ctx, storage.Record{Kind: kind, ID: entities[i], Owner: owner, Unique: []string{"u"}, Data: []byte("d")}); err != nil {
			t.Fatal(err)
		}
		if err := s.SaveAttributes(ctx, entities[i], storage.ServerScope, []kv.Entry{{Ts: 1, Key: "a", Value: kv.LongValue(int64(i))}}); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, storage.Row{EntityID: entities[i], Entry: kv.Entry{Ts: 1, Key: "t", Value: kv.LongValue(int64(i))}})
	}
	if _, err := s.UpdateLatest(ctx, rows, nil); err != nil {
		t.Fatal(err)
	}
	for i, e := range entities {
		kind := fmt.Sprintf("kind%d", i)
		if r, err := s.Lookup(ctx, kind, "u"); err != nil || r.ID != e {
			t.Fatalf("Lookup %s: %v, %v", kind, r.ID, err)
		}
		if l, err := s.List(ctx, kind, owner); err != nil || len(l) != 1 {
			t.Fatalf("List %s: %v, %v", kind, l, err)
		}
		want := fmt.Sprint([]kv.Entry{{Ts: 1, Key: "t", Value: kv.LongValue(int64(i))}})
		if got, err := s.LatestValues(ctx, e, nil); err != nil || fmt.Sprint(got) != want {
			t.Fatalf("latest of %d: %v, %v; want %s", i, got, err, want)
		}
		want = fmt.Sprint([]kv.Entry{{Ts: 1, Key: "a", Value: kv.LongValue(int64(i))}})
		if got, err := s.GetAttributes(ctx, e, storage.ServerScope, nil); err != nil || fmt.Sprint(got) != want {
			t.Fatalf("attributes of %d: %v, %v; want %s", i, got, err, want)
		}
	}

	perMaster := keysPerMaster(t, s)
	if len(perMaster) < 3 {
		t.Fatalf("keys on %d masters (%v), want every master of 3", len(perMaster), perMaster)
	}
	for addr, k := range perMaster {
		if k == 0 {
			t.Fatalf("no keys on master %s: %v", addr, perMaster)
		}
	}
	if err := s.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	for addr, k := range keysPerMaster(t, s) {
		if k != 0 {
			t.Fatalf("%d keys left on master %s after Drop", k, addr)
		}
	}
}

// keysPerMaster counts the store's keys on each master.
func keysPerMaster(t *testing.T, s *Store) map[string]int {
	t.Helper()
	var mu sync.Mutex
	out := make(map[string]int)
	err := s.Client().(*goredis.ClusterClient).ForEachMaster(t.Context(), func(ctx context.Context, c *goredis.Client) error {
		keys, err := c.Keys(ctx, s.Prefix()+"*").Result()
		mu.Lock()
		defer mu.Unlock()
		out[c.Options().Addr] = len(keys)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
