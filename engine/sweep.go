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
// afterwards: latest values and history, client attributes, ingest counters, a
// claim, an RPC. Nothing reads them again (a device id is never reused), so
// they would stay for good. Likewise a tenant's admin, whose user a node may
// still have cached for AuthCacheTTL, can create a device or a customer while
// the tenant is being deleted. The node that deleted the device (the tenant)
// therefore deletes what is left once more, the longer of the two cache
// lifetimes and sweepSlack later. A node stopped before then runs the sweeps
// it still has at Close; a node killed leaves what stragglers there were.

// sweepSlack covers a straggler's way from its token check to storage: the
// ingest queue and commit, and a spool delivery (1 s by default). A variable for
// tests.
var sweepSlack = 10 * time.Second

// sweepTimeout bounds one device's sweep.
const sweepTimeout = 30 * time.Second

// sweeper holds the sweeps due on this node.
type sweeper struct {
	mu      sync.Mutex
	pending map[sweep]*time.Timer
	closed  bool
	running sync.WaitGroup
}

// sweep is a deleted device or tenant whose leftovers are to be deleted.
type sweep struct {
	tenant bool
	id     uuid.UUID
}

// sweepLater schedules the second deletion of a deleted device's (tenant's)
// leftovers.
func (e *Engine) sweepLater(w sweep) {
	s := &e.sweeps
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.pending[w] != nil {
		return
	}
	if s.pending == nil {
		s.pending = map[sweep]*time.Timer{}
	}
	s.pending[w] = time.AfterFunc(max(e.cfg.TokenCacheTTL, e.cfg.AuthCacheTTL)+sweepSlack, func() {
		s.mu.Lock()
		if s.closed || s.pending[w] == nil {
			s.mu.Unlock()
			return // Close has taken it
		}
		delete(s.pending, w)
		s.running.Add(1)
		s.mu.Unlock()
		defer s.running.Done()
		ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
		defer cancel()
		e.runSweep(ctx, w)
	})
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
	err := e.removeEntityData(ctx, id)
	if err == nil {
		err = e.removeDeviceRPCs(ctx, id)
	}
	if err == nil {
		err = e.dropClaim(ctx, id)
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

// Close runs the sweeps still due, within ctx, and waits for those running. Call
// it once the node takes no more requests and before the store closes.
func (e *Engine) Close(ctx context.Context) {
	s := &e.sweeps
	s.mu.Lock()
	s.closed = true
	due := make([]sweep, 0, len(s.pending))
	for w, t := range s.pending {
		t.Stop()
		due = append(due, w)
	}
	s.pending = nil
	s.mu.Unlock()
	for _, w := range due {
		if ctx.Err() != nil {
			break
		}
		e.runSweep(ctx, w)
	}
	s.running.Wait()
}
