package ingest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/ingest"
	"github.com/sluice-iot/sluice/internal/testenv"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/clickhouse"
	"github.com/sluice-iot/sluice/storage/redis"
	"github.com/sluice-iot/sluice/storage/split"
	"github.com/sluice-iot/sluice/storage/storagetest"
)

// flushed makes every Write wait for the spool's delivery, so the conformance
// suite, which reads history right after writing, sees the production write path:
// spool → ClickHouse for history, Redis for latest values.
type flushed struct{ *ingest.Spooled }

func (f flushed) Write(ctx context.Context, rows []storage.Row) error {
	if err := f.Spooled.Write(ctx, rows); err != nil {
		return err
	}
	return f.Spool.Flush(ctx)
}

// openStores opens a fresh ClickHouse database and Redis prefix of their own;
// the caller drops and closes them.
func openStores(t *testing.T) (*clickhouse.Store, *redis.Store) {
	t.Helper()
	env := testenv.Service(t, "CLICKHOUSE_ADDR", "REDIS_ADDR")
	var b [6]byte
	rand.Read(b[:])
	name := hex.EncodeToString(b[:])
	ch, err := clickhouse.Open(context.Background(), clickhouse.Options{Addrs: []string{env[0]}, Database: "sluice_test_" + name})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := redis.Open(context.Background(), redis.Options{Addrs: []string{env[1]}, Prefix: "sluicetest:" + name + ":"})
	if err != nil {
		ch.Close()
		t.Fatal(err)
	}
	return ch, rs
}

func TestSpooledConformance(t *testing.T) {
	testenv.Service(t, "CLICKHOUSE_ADDR", "REDIS_ADDR")
	storagetest.Run(t, func(t *testing.T) storage.Backend {
		ctx := context.Background()
		ch, rs := openStores(t)
		// 10,000-row deliveries: the concurrency cases write a few hundred
		// thousand rows, and smaller inserts reach ClickHouse sooner.
		spool, err := ingest.OpenSpool(ingest.SpoolConfig{Dir: t.TempDir(), BatchRows: 10000}, ch)
		if err != nil {
			t.Fatal(err)
		}
		tel := &ingest.Spooled{Spool: spool, History: ch, LatestStore: rs}
		backend := split.New(flushed{tel}, rs)
		t.Cleanup(func() {
			ch.Drop(ctx)
			rs.Drop(ctx)
			backend.Close()
		})
		return backend
	})
}

// TestSpooledVersions: history orders writes and deletes by when they were
// acknowledged, not by when a spool delivered them. Two nodes share ClickHouse
// and Redis; each spool delivers only when flushed.
//   - A point written on node A, then again on node B, keeps B's value even
//     when A's spool delivers last.
//   - A point acknowledged before a delete (on another node) and delivered
//     after it stays deleted.
//   - A delete that rewrites the latest value from history sees the points its
//     own node still spools, and leaves a newer value written meanwhile; the
//     points another node spools reach the latest value when delivered.
func TestSpooledVersions(t *testing.T) {
	testenv.Service(t, "CLICKHOUSE_ADDR", "REDIS_ADDR")
	ctx := context.Background()
	ch, rs := openStores(t)
	t.Cleanup(func() { ch.Drop(ctx); rs.Drop(ctx); rs.Close(); ch.Close() })
	node := func() *ingest.Spooled {
		spool, err := ingest.OpenSpool(ingest.SpoolConfig{Dir: t.TempDir(), FlushInterval: time.Hour}, ingest.ReapplyLatest(ch, rs, nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { spool.Close(ctx) })
		return &ingest.Spooled{Spool: spool, History: ch, LatestStore: rs}
	}
	a, bn := node(), node()
	dev := uuid.New()
	write := func(n *ingest.Spooled, key string, ts, v int64) {
		t.Helper()
		if err := n.Write(ctx, []storage.Row{{EntityID: dev, Entry: kv.Entry{Ts: ts, Key: key, Value: kv.LongValue(v)}}}); err != nil {
			t.Fatal(err)
		}
	}
	flush := func(n *ingest.Spooled) {
		t.Helper()
		if err := n.Spool.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	history := func(key string) string {
		t.Helper()
		es, err := ch.Read(ctx, storage.ReadQuery{EntityID: dev, Key: key, StartTs: 0, EndTs: 1000, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, fmt.Sprintf("%d=%d", e.Ts, e.Value.Long))
		}
		return strings.Join(out, ",")
	}
	latest := func(key string) string {
		t.Helper()
		es, err := rs.LatestValues(ctx, dev, []string{key})
		if err != nil || len(es) > 1 {
			t.Fatal(es, err)
		}
		if len(es) == 0 {
			return ""
		}
		return fmt.Sprintf("%d=%d", es[0].Ts, es[0].Value.Long)
	}

	write(a, "twice", 100, 1)
	write(bn, "twice", 100, 2)
	flush(bn)
	flush(a)
	if got := history("twice"); got != "100=2" {
		t.Fatalf("written on A then on B, delivered the other way round: history %s, want 100=2", got)
	}

	write(a, "gone", 100, 1)
	write(a, "gone", 200, 2)
	del := storage.DeleteQuery{EntityID: dev, Keys: []string{"gone"}, StartTs: 150, EndTs: 300, DeleteLatest: true}
	if err := bn.DeleteSeries(ctx, del); err != nil {
		t.Fatal(err)
	}
	flush(a)
	if got := history("gone"); got != "100=1" {
		t.Fatalf("acknowledged before a delete, delivered after it: history %s, want 100=1", got)
	}
	if got := latest("gone"); got != "" {
		t.Fatalf("latest %s after the delete, want none", got)
	}

	write(a, "rewrite", 100, 1)
	write(a, "rewrite", 200, 2)
	del = storage.DeleteQuery{EntityID: dev, Keys: []string{"rewrite"}, StartTs: 150, EndTs: 300, DeleteLatest: true, RewriteLatest: true}
	if err := a.DeleteSeries(ctx, del); err != nil {
		t.Fatal(err)
	}
	if got, want := latest("rewrite")+" "+history("rewrite"), "100=1 100=1"; got != want {
		t.Fatalf("rewritten from history with the point still spooled: latest and history %s, want %s", got, want)
	}

	// A rewrite on another node cannot read what A still spools; A applies it
	// to the latest value when it delivers, and the deleted point stays out.
	write(a, "elsewhere", 100, 1)
	write(a, "elsewhere", 200, 2)
	write(a, "untouched", 100, 5)
	del = storage.DeleteQuery{EntityID: dev, Keys: []string{"elsewhere"}, StartTs: 150, EndTs: 300, DeleteLatest: true, RewriteLatest: true}
	if err := bn.DeleteSeries(ctx, del); err != nil {
		t.Fatal(err)
	}
	if got := latest("elsewhere"); got != "" {
		t.Fatalf("latest %s before A delivers, want none", got)
	}
	flush(a)
	if got, want := latest("elsewhere")+" "+history("elsewhere")+" "+latest("untouched"), "100=1 100=1 100=5"; got != want {
		t.Fatalf("rewritten on B, delivered by A: latest, history and other key %s, want %s", got, want)
	}

	// A newer latest value than the range is not deleted with it.
	write(a, "newer", 200, 2)
	write(bn, "newer", 400, 4)
	del = storage.DeleteQuery{EntityID: dev, Keys: []string{"newer"}, StartTs: 150, EndTs: 300, DeleteLatest: true}
	if err := a.DeleteSeries(ctx, del); err != nil {
		t.Fatal(err)
	}
	if got := latest("newer"); got != "400=4" {
		t.Fatalf("latest %s, want the newer 400=4", got)
	}
}

// heldLatest holds UpdateLatest until released: a latest-store round trip
// slower than a delete on another node.
type heldLatest struct {
	ingest.LatestStore
	started, release chan struct{}
}

func (h *heldLatest) UpdateLatest(ctx context.Context, rows []storage.Row, vers []uint64) ([]uuid.UUID, error) {
	close(h.started)
	<-h.release
	return h.LatestStore.UpdateLatest(ctx, rows, vers)
}

// TestSpooledWriteRacingDelete: a write whose versions were taken before a
// delete of its key, and whose latest value lands after the delete, is hidden
// in history by the delete's tombstone and must not be the latest value
// either. Before, it was acknowledged, shown as latest and missing in history
// for good.
func TestSpooledWriteRacingDelete(t *testing.T) {
	testenv.Service(t, "CLICKHOUSE_ADDR", "REDIS_ADDR")
	ctx := context.Background()
	ch, rs := openStores(t)
	t.Cleanup(func() { ch.Drop(ctx); rs.Drop(ctx); rs.Close(); ch.Close() })
	spool, err := ingest.OpenSpool(ingest.SpoolConfig{Dir: t.TempDir(), FlushInterval: time.Hour}, ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { spool.Close(ctx) })
	held := &heldLatest{LatestStore: rs, started: make(chan struct{}), release: make(chan struct{})}
	writer := &ingest.Spooled{Spool: spool, History: ch, LatestStore: held}
	other := &ingest.Spooled{Spool: spool, History: ch, LatestStore: rs}
	dev := uuid.New()
	row := storage.Row{TenantID: uuid.New(), EntityID: dev, Entry: kv.Entry{Ts: 1000, Key: "t", Value: kv.LongValue(42)}}
	done := make(chan error, 1)
	go func() { done <- writer.Write(ctx, []storage.Row{row}) }()
	<-held.started // the write's versions are taken
	if err := other.DeleteSeries(ctx, storage.DeleteQuery{EntityID: dev, Keys: []string{"t"},
		StartTs: 0, EndTs: 2000, DeleteLatest: true}); err != nil {
		t.Fatal(err)
	}
	close(held.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := spool.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	latest, err := other.Latest(ctx, dev, []string{"t"})
	if err != nil {
		t.Fatal(err)
	}
	hist, err := other.Read(ctx, storage.ReadQuery{EntityID: dev, Key: "t", StartTs: 0, EndTs: 2000, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(latest) != 0 || len(hist) != 0 {
		t.Fatalf("after a write racing a delete: latest %v, history %v; want neither", latest, hist)
	}
}
