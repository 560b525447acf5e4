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
// they would stay for good. The node that deleted the device therefore deletes
// its data once more, TokenCacheTTL and sweepSlack later. A node stopped before
// then runs the sweeps it still has at Close; a node killed leaves what
// stragglers there were.

// sweepSlack covers a straggler's way from its token check to storage: the
// ingest queue and commit, and a spool delivery (1 s by default). A variable for
// tests.
var sweepSlack = 10 * time.Second

// sweepTimeout bounds one device's sweep.
const sweepTimeout = 30 * time.Second

// sweeper holds the sweeps due on this node.
type sweeper struct {
	mu      sync.Mutex
	pending map[uuid.UUID]*time.Timer
	closed  bool
	running sync.WaitGroup
}

// sweepLater schedules the second deletion of a deleted device's data.
func (e *Engine) sweepLater(id uuid.UUID) {
	s := &e.sweeps
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.pending[id] != nil {
		return
	}
	if s.pending == nil {
		s.pending = map[uuid.UUID]*time.Timer{}
	}
	s.pending[id] = time.AfterFunc(e.cfg.TokenCacheTTL+sweepSlack, func() {
		s.mu.Lock()
		if s.closed || s.pending[id] == nil {
			s.mu.Unlock()
			return // Close has taken it
		}
		delete(s.pending, id)
		s.running.Add(1)
		s.mu.Unlock()
		defer s.running.Done()
		ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
		defer cancel()
		e.sweepDevice(ctx, id)
	})
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

// Close runs the sweeps still due, within ctx, and waits for those running. Call
// it once the node takes no more requests and before the store closes.
func (e *Engine) Close(ctx context.Context) {
	s := &e.sweeps
	s.mu.Lock()
	s.closed = true
	due := make([]uuid.UUID, 0, len(s.pending))
	for id, t := range s.pending {
		t.Stop()
		due = append(due, id)
	}
	s.pending = nil
	s.mu.Unlock()
	for _, id := range due {
		if ctx.Err() != nil {
			break
		}
		e.sweepDevice(ctx, id)
	}
	s.running.Wait()
}
