package split

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// Counters live with the platform state (Redis in production): every node shares
// them, and ClickHouse has no cheap atomic increment.

var _ storage.Counters = (*Backend)(nil)

var errNoCounters = errors.New("split: the state back end keeps no counters")

// AddCounters delegates to the state back end.
func (b *Backend) AddCounters(ctx context.Context, deltas []storage.CounterDelta) error {
	c, ok := b.Entities.(storage.Counters)
	if !ok {
		return errNoCounters
	}
	return c.AddCounters(ctx, deltas)
}

// DeleteCounters delegates to the state back end.
func (b *Backend) DeleteCounters(ctx context.Context, entityID uuid.UUID) error {
	c, ok := b.Entities.(storage.Counters)
	if !ok {
		return errNoCounters
	}
	return c.DeleteCounters(ctx, entityID)
}

// Counters delegates to the state back end.
func (b *Backend) Counters(ctx context.Context, entityID uuid.UUID) (map[string]int64, error) {
	c, ok := b.Entities.(storage.Counters)
	if !ok {
		return nil, errNoCounters
	}
	return c.Counters(ctx, entityID)
}
