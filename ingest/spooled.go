package ingest

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/version"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// LatestStore keeps the latest value of each (entity, key) apart from history
// (Redis in production), so it is visible as soon as a write is acknowledged.
type LatestStore interface {
	// UpdateLatest makes each row the latest value unless a newer ts is stored;
	// on equal ts the later write wins. vers are the rows' history versions (nil:
	// none): a row older than a delete of its key that covers its ts is hidden
	// in history, so it does not become the latest value either. It returns the
	// entities whose rows may repeat points written before (a ts not newer than
	// the stored one, or one ts twice in rows); the other rows are new points.
	UpdateLatest(ctx context.Context, rows []storage.Row, vers []uint64) ([]uuid.UUID, error)
	LatestValues(ctx context.Context, entityID uuid.UUID, keys []string) ([]kv.Entry, error)
	LatestKeys(ctx context.Context, entityID uuid.UUID) ([]string, error)
	// DeleteLatest removes keys; nil removes every key of the entity.
	DeleteLatest(ctx context.Context, entityID uuid.UUID, keys []string) error
	// DeleteLatestIn removes those of keys whose latest ts lies in [startTs,
	// endTs), as one step per entity (a newer value written meanwhile stays),
	// and returns them. ver is the delete's version: for a while, an
	// UpdateLatest of an older row in the range, still in flight, is ignored.
	DeleteLatestIn(ctx context.Context, entityID uuid.UUID, keys []string, startTs, endTs int64, ver uint64) ([]string, error)
	// NoteRewrite records, for about as long as DeleteLatestIn's marks last,
	// that a delete rewrote the latest values of the entity's keys from
	// history. ReapplyLatest makes the newest of rows of such keys that no
	// delete hides the latest value, unless a newer one is stored; rows of
	// other keys it leaves (see the function ReapplyLatest).
	NoteRewrite(ctx context.Context, entityID uuid.UUID, keys []string) error
	ReapplyLatest(ctx context.Context, rows []storage.Row, vers []uint64) error
}

// HistoryStore is the slow, large history store behind the spool (ClickHouse).
type HistoryStore interface {
	storage.Telemetry
	Sink
	Close() error
}

// Spooled is the production storage.Telemetry: a write is acknowledged once it is
// in the local spool (durable) and in the latest store (visible at once); the spool
// delivers history to the history store within about a flush interval. History
// reads go to the history store, latest reads to the latest store.
type Spooled struct {
	Spool       *Spool
	History     HistoryStore
	LatestStore LatestStore
}

// Write spools rows and updates the latest values at the same time: the latest
// store's round trip starts once the spool has appended the rows and overlaps
// its fsync, so the commit waits for the longer of the two, not for both in
// turn. The caller acknowledges the rows only when both succeed (a 2xx only
// after the fsync). A write the spool refuses (full, closed, failed, no space
// left for the append) changes no latest value: a node that answers 503 does
// not show values it refused. If the fsync or the latest store fails the
// client sees an error and retries, and the part that did succeed is
// repeated, which both absorb (the same entity, key and ts replace each
// other); a failed fsync also stops the spool's writes until a restart, which
// recovers what reached the disk.
//
// The latest store also says which entities' rows may repeat points written
// before; the spool holds the records back from delivery until it knows
// (WritePending, Resolve), and delivers the other rows as new points, which
// reports read without de-duplicating (storage/clickhouse telemetry_repeats). If
// the latest store fails, every row counts as a possible repeat.
func (t *Spooled) Write(ctx context.Context, rows []storage.Row) error {
	if len(rows) == 0 {
		return nil
	}
	type answer struct {
		repeats []uuid.UUID
		err     error
	}
	// The versions are taken first, so that the latest store can tell these
	// rows from a delete racing them as history will (a delete hides the rows
	// older than it): otherwise a row the delete hides in history could still
	// become the latest value.
	base := version.Reserve(len(rows))
	vers := t.Spool.RowVersions(rows, base)
	latest := make(chan answer, 1)
	started := false
	p, err := t.Spool.write(rows, true, base, func() {
		started = true
		go func() {
			r, err := t.LatestStore.UpdateLatest(ctx, rows, vers)
			latest <- answer{r, err}
		}()
	})
	if !started {
		return err // refused before the append
	}
	a := <-latest
	if err == nil {
		t.Spool.Resolve(p, a.repeats, a.err != nil)
	}
	return errors.Join(err, a.err)
}

// Latest reads the latest store.
func (t *Spooled) Latest(ctx context.Context, entityID uuid.UUID, keys []string) ([]kv.Entry, error) {
	return t.LatestStore.LatestValues(ctx, entityID, keys)
}

// SeriesKeys reads the latest store.
func (t *Spooled) SeriesKeys(ctx context.Context, entityID uuid.UUID) ([]string, error) {
	return t.LatestStore.LatestKeys(ctx, entityID)
}

// Read reads history. Rows acknowledged less than a flush interval ago may not be
// there yet.
func (t *Spooled) Read(ctx context.Context, q storage.ReadQuery) ([]kv.Entry, error) {
	return t.History.Read(ctx, q)
}

// DeleteSeries deletes history, then the latest values whose ts lies in the range,
// rewriting them from the remaining history when asked. Points acknowledged
// before it and still in a spool are deleted all the same: their versions are
// older than the delete's (internal/version). A rewrite reads history, so this
// node's spool delivers the entity's points first; what other nodes' spools
// still hold they apply to the latest values when they deliver it
// (ReapplyLatest), told by NoteRewrite, which comes before the read.
func (t *Spooled) DeleteSeries(ctx context.Context, q storage.DeleteQuery) error {
	if q.DeleteLatest && q.RewriteLatest {
		if err := t.Spool.FlushEntity(ctx, q.EntityID); err != nil {
			return err
		}
		if err := t.LatestStore.NoteRewrite(ctx, q.EntityID, q.Keys); err != nil {
			return err
		}
	}
	if q.Version == 0 {
		q.Version = version.Reserve(1) // the tombstone's, which the latest store is told too
	}
	if err := t.History.DeleteSeries(ctx, q); err != nil {
		return err
	}
	if !q.DeleteLatest {
		return nil
	}
	gone, err := t.LatestStore.DeleteLatestIn(ctx, q.EntityID, q.Keys, q.StartTs, q.EndTs, q.Version)
	if err != nil || !q.RewriteLatest {
		return err
	}
	for _, key := range gone {
		rest, err := t.History.Read(ctx, storage.ReadQuery{EntityID: q.EntityID, Key: key,
			StartTs: math.MinInt64, EndTs: math.MaxInt64, Limit: 1})
		if err != nil {
			return err
		}
		if len(rest) == 1 {
			row := storage.Row{EntityID: q.EntityID, Entry: rest[0]}
			if _, err := t.LatestStore.UpdateLatest(ctx, []storage.Row{row}, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// DeleteEntitySeries removes the entity's history and latest values.
func (t *Spooled) DeleteEntitySeries(ctx context.Context, entityID uuid.UUID) error {
	return errors.Join(t.History.DeleteEntitySeries(ctx, entityID), t.LatestStore.DeleteLatest(ctx, entityID, nil))
}

// Close delivers what it can within ten seconds (the rest stays spooled for the
// next start), closes the spool, then the history store.
func (t *Spooled) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(t.Spool.Close(ctx), t.History.Close())
}

// ReapplyLatest wraps the history sink of a spool: once a delivery is in
// history, its rows of the series whose latest values a delete rewrote from
// history lately (on any node) go to the latest store again. A node's rewrite
// reads history, which lacks what other nodes' spools still hold; without this
// a point acknowledged before the delete, outside its range, and delivered
// after it would never become the latest value again. The latest store keeps
// the newest row and ignores those the delete covers (its marks), so applying
// rows twice changes nothing.
//
// The delivery does not wait on it: history has the rows, and failing it
// would insert them into ClickHouse again with every retry while Redis is
// away. The reapply is tried a few times (once when Redis is unreachable);
// one that still fails is logged (at most once a minute), and those latest
// values stay as the rewrite left them.
func ReapplyLatest(history Sink, latest LatestStore, log *slog.Logger) Sink {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &reapplySink{history: history, latest: latest, log: log}
}

type reapplySink struct {
	history Sink
	latest  LatestStore
	log     *slog.Logger
	logged  atomic.Bool // a failure was logged within the last minute
}

// reapplyBackoff is the wait before each retry of a failed reapply.
var reapplyBackoff = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}

func (r *reapplySink) WriteHistory(ctx context.Context, rows []storage.Row, mayRepeat []bool, vers []uint64) error {
	if err := r.history.WriteHistory(ctx, rows, mayRepeat, vers); err != nil {
		return err
	}
	err := r.latest.ReapplyLatest(ctx, rows, vers)
	for _, wait := range reapplyBackoff {
		if err == nil {
			return nil
		}
		if errors.Is(err, storage.ErrUnavailable) {
			break // Redis is away: no delivery waits for it (nor for retries)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		err = r.latest.ReapplyLatest(ctx, rows, vers)
	}
	if err != nil && r.logged.CompareAndSwap(false, true) {
		// Once per outage-ish: every delivery would say the same.
		r.log.Error("cannot apply deliveries to latest values that a delete on another node rewrote; they keep what the rewrite found", "rows", len(rows), "err", err)
		time.AfterFunc(time.Minute, func() { r.logged.Store(false) })
	}
	return nil
}
