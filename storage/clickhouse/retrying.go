package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// Retrying is a Store that a node may start without: when ClickHouse (or a
// shard of its cluster) cannot be reached at start, OpenRetrying returns at
// once and keeps opening the Store in the background. Until it is open every
// call is storage.ErrUnavailable, which the spool retries (acknowledged
// telemetry waits on disk, as in an outage of a running node) and the HTTP
// front end answers with 503. A node restarted during a ClickHouse outage thus
// keeps taking telemetry instead of staying down with it.
type Retrying struct {
	store  atomic.Pointer[Store]
	cancel context.CancelFunc
	done   chan struct{}
}

// errNotOpenYet answers calls before the Store is open.
var errNotOpenYet = fmt.Errorf("clickhouse: not reached yet since the start: %w", storage.ErrUnavailable)

// OpenRetrying opens a Store as Open does. An error other than
// unavailability (a bad name, refused credentials, a cluster missing from
// remote_servers) is returned: waiting would not mend it. Unavailability is
// logged, and the Store is opened again every `every` until it opens or
// Close is called.
func OpenRetrying(ctx context.Context, opts Options, log *slog.Logger, every time.Duration) (*Retrying, error) {
	r := &Retrying{done: make(chan struct{})}
	s, err := Open(ctx, opts)
	if err == nil {
		r.store.Store(s)
		r.cancel = func() {}
		close(r.done)
		return r, nil
	}
	if !errors.Is(err, storage.ErrUnavailable) {
		return nil, err
	}
	log.Warn("ClickHouse cannot be reached; the node starts without it: telemetry is spooled and history reads answer 503 until it can be",
		"addrs", opts.Addrs, "retryEvery", every, "err", err)
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	go func() {
		defer close(r.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-bg.Done():
				return
			case <-t.C:
			}
			s, err := Open(bg, opts)
			switch {
			case err == nil:
				r.store.Store(s)
				log.Info("ClickHouse reached; spooled telemetry is being delivered", "addrs", opts.Addrs)
				return
			case !errors.Is(err, storage.ErrUnavailable) && bg.Err() == nil:
				// Reached, but refused: say so loudly, and keep trying, since
				// an operator may mend it without restarting the node.
				log.Error("ClickHouse refuses this node; retrying", "addrs", opts.Addrs, "err", err)
			}
		}
	}()
	return r, nil
}

// Open reports whether the Store is open.
func (r *Retrying) Open() bool { return r.store.Load() != nil }

func (r *Retrying) get() (*Store, error) {
	if s := r.store.Load(); s != nil {
		return s, nil
	}
	return nil, errNotOpenYet
}

// Close stops the attempts and closes the Store if it is open.
func (r *Retrying) Close() error {
	r.cancel()
	<-r.done
	if s := r.store.Load(); s != nil {
		return s.Close()
	}
	return nil
}

func (r *Retrying) Write(ctx context.Context, rows []storage.Row) error {
	s, err := r.get()
	if err != nil {
		return err
	}
	return s.Write(ctx, rows)
}

func (r *Retrying) WriteHistory(ctx context.Context, rows []storage.Row, mayRepeat []bool, vers []uint64) error {
	s, err := r.get()
	if err != nil {
		return err
	}
	return s.WriteHistory(ctx, rows, mayRepeat, vers)
}

func (r *Retrying) Latest(ctx context.Context, entityID uuid.UUID, keys []string) ([]kv.Entry, error) {
	s, err := r.get()
	if err != nil {
		return nil, err
	}
	return s.Latest(ctx, entityID, keys)
}

func (r *Retrying) Read(ctx context.Context, q storage.ReadQuery) ([]kv.Entry, error) {
	s, err := r.get()
	if err != nil {
		return nil, err
	}
	return s.Read(ctx, q)
}

func (r *Retrying) SeriesKeys(ctx context.Context, entityID uuid.UUID) ([]string, error) {
	s, err := r.get()
	if err != nil {
		return nil, err
	}
	return s.SeriesKeys(ctx, entityID)
}

func (r *Retrying) DeleteSeries(ctx context.Context, q storage.DeleteQuery) error {
	s, err := r.get()
	if err != nil {
		return err
	}
	return s.DeleteSeries(ctx, q)
}

func (r *Retrying) DeleteEntitySeries(ctx context.Context, entityID uuid.UUID) error {
	s, err := r.get()
	if err != nil {
		return err
	}
	return s.DeleteEntitySeries(ctx, entityID)
}

func (r *Retrying) Report(ctx context.Context, q storage.ReportQuery) ([]storage.ReportRow, error) {
	s, err := r.get()
	if err != nil {
		return nil, err
	}
	return s.Report(ctx, q)
}
