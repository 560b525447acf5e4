package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// Deleting a device removes its data, but a request that passed the device's
// token check just before (on this node, or on another one whose token cache
// has not heard of the deletion, for up to TokenCacheTTL) can still write
// afterwards: latest values, client attributes, ingest counters, a claim, an
// RPC. Nothing reads them again (a device id is never reused), so they would
// stay for good. Likewise a tenant's admin, whose user a node may still have
// cached for AuthCacheTTL, can create a device or a customer while the tenant
// is being deleted. The node that deleted the device (the tenant) therefore
// deletes what is left once more, the longer of the two cache lifetimes and
// sweepSlack later: one sweep at a time, so deleting a tenant of ten thousand
// devices does not fire ten thousand sweeps at the store at once. A node
// stopped before then runs the sweeps it still has at Close; a node killed
// leaves what stragglers there were.

// sweepSlack covers a straggler's way from its token check to storage: the
// ingest queue and its commit. A variable for tests.
var sweepSlack = 10 * time.Second

// sweepTimeout bounds one sweep.
const sweepTimeout = 30 * time.Second

// sweep is a deleted device or tenant whose leftovers are to be deleted.
type sweep struct {
	tenant bool
	id     uuid.UUID
}

// dueSweep is a sweep and when it is due.
type dueSweep struct {
	sweep
	due time.Time
}

// sweeper holds the sweeps due on this node. Every sweep waits the same time,
// so the queue is in due order; one worker runs them.
type sweeper struct {
	mu      sync.Mutex
	queue   []dueSweep
	queued  map[sweep]bool
	wake    chan struct{}
	closed  bool
	running bool          // the worker is started
	done    chan struct{} // closed when the worker has stopped
}

// sweepLater schedules the second deletion of a deleted device's (tenant's)
// leftovers.
func (e *Engine) sweepLater(w sweep) {
	s := &e.sweeps
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.queued[w] {
		return
	}
	if s.queued == nil {
		s.queued, s.wake = map[sweep]bool{}, make(chan struct{}, 1)
	}
	s.queued[w] = true
	s.queue = append(s.queue, dueSweep{w, time.Now().Add(max(e.cfg.TokenCacheTTL, e.cfg.AuthCacheTTL) + sweepSlack)})
	if !s.running {
		s.running, s.done = true, make(chan struct{})
		go e.sweepWorker()
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// sweepWorker runs the queued sweeps when they are due, until Close.
func (e *Engine) sweepWorker() {
	s := &e.sweeps
	defer close(s.done)
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		wait := time.Hour
		var next *dueSweep
		if len(s.queue) > 0 {
			if wait = time.Until(s.queue[0].due); wait <= 0 {
				next = &dueSweep{}
				*next = s.queue[0]
				s.queue = s.queue[1:]
				delete(s.queued, next.sweep)
			}
		}
		s.mu.Unlock()
		if next == nil {
			t := time.NewTimer(wait)
			select {
			case <-s.wake:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
		e.runSweep(ctx, next.sweep)
		cancel()
	}
}

// runSweep deletes the leftovers of w.
func (e *Engine) runSweep(ctx context.Context, w sweep) {
	if w.tenant {
		e.sweepTenant(ctx, w.id)
	} else {
		e.sweepDevice(ctx, w.id)
	}
}

// sweepDevice deletes what was written for a deleted device after its deletion.
func (e *Engine) sweepDevice(ctx context.Context, id uuid.UUID) {
	if _, err := e.loadDevice(ctx, id); !errors.Is(err, storage.ErrNotFound) {
		return // not deleted after all (the deletion failed half-way), or unknown
	}
	// Credentials too: a node stopped inside a deletion racing a token change
	// may have left some, and they would hold their token for good.
	err := e.dropCredentials(ctx, id)
	if err == nil {
		err = e.removeEntityData(ctx, id)
	}
	if err == nil {
		err = e.removeDeviceRPCs(ctx, id)
	}
	if err == nil {
		err = e.dropClaim(ctx, id)
	}
	if err == nil {
		err = e.dropProvisionGuard(ctx, id)
	}
	if err != nil {
		e.cfg.Logger.Warn("cannot delete data written for a device after its deletion", "device", id, "err", err)
	}
}

// sweepTenant deletes what was created in a deleted tenant after its deletion.
func (e *Engine) sweepTenant(ctx context.Context, id uuid.UUID) {
	if _, err := getRecord[Tenant](ctx, e, kindTenant, id); !errors.Is(err, storage.ErrNotFound) {
		return
	}
	if err := e.removeTenant(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
		e.cfg.Logger.Warn("cannot delete what was created in a tenant after its deletion", "tenant", id, "err", err)
	}
}

// Close stops the sweep worker (after the sweep it is running) and runs the
// sweeps still queued, due or not, within ctx. Call it once the node takes no
// more requests and its last writes are in, before the store closes.
func (e *Engine) Close(ctx context.Context) {
	e.closeRollouts()    // what they leave undone, the next start resumes
	e.closeActivity(ctx) // before the sweeps, which delete what it writes of deleted devices
	s := &e.sweeps
	s.mu.Lock()
	s.closed = true
	left, running, done := s.queue, s.running, s.done
	s.queue, s.queued = nil, nil
	if s.wake != nil {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	if running {
		<-done
	}
	for _, w := range left {
		if ctx.Err() != nil {
			break
		}
		e.runSweep(ctx, w.sweep)
	}
}
