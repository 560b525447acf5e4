package storage

import (
	"context"

	"github.com/google/uuid"
)

// Counters keeps named int64 counters per entity (the per-device ingest
// statistics), shared by every node of a deployment and kept across restarts.
// Nodes tally locally and add their deltas in batches, so a counter is a sum of
// many nodes' adds and never read-modify-written by a caller.
type Counters interface {
	// AddCounters adds each delta to its counter (a missing counter starts at 0),
	// durably when it returns nil. On an error some deltas may have been added;
	// a *FailedDeltasError then says which were not.
	AddCounters(ctx context.Context, deltas []CounterDelta) error
	// Counters returns every counter of the entity; none is an empty map.
	Counters(ctx context.Context, entityID uuid.UUID) (map[string]int64, error)
	// DeleteCounters removes every counter of the entity (device deletion).
	DeleteCounters(ctx context.Context, entityID uuid.UUID) error
}

// CounterDelta is an amount to add to one counter of one entity.
type CounterDelta struct {
	EntityID uuid.UUID
	Name     string
	Delta    int64
}

// FailedDeltasError is returned by AddCounters when only some deltas were not
// added (a pipeline to several servers): Failed holds those, for a retry that
// does not count the others twice.
type FailedDeltasError struct {
	Failed []CounterDelta
	Err    error
}

func (e *FailedDeltasError) Error() string { return e.Err.Error() }
func (e *FailedDeltasError) Unwrap() error { return e.Err }
