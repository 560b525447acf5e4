package ingest

import (
	"errors"

	"github.com/sluice-iot/sluice/storage"
)

// Tally receives per-device point counts (engine.IngestStats): the writer reports
// what it acknowledged and what it refused, the spool what it delivered. Calls run
// on the commit and delivery paths, so they must be cheap and must not keep rows.
type Tally interface {
	// Accepted counts rows acknowledged to their writers (any number of devices).
	Accepted(rows []storage.Row)
	// Rejected counts one refused write request (rows of one device) and its rows.
	Rejected(rows []storage.Row, reason string)
	// Stored counts rows the history store now holds (any number of devices).
	Stored(rows []storage.Row)
}

// Reasons a write is refused after its body parsed; they are also the reason
// label of sluice_points_rejected_total.
const (
	ReasonQueueFull   = "queue_full"  // a shard's queue is full (ErrOverloaded)
	ReasonSpoolFull   = "spool_full"  // the spool is full (ErrSpoolFull)
	ReasonUnavailable = "unavailable" // the writer is closing or storage is down
	ReasonStorage     = "storage"     // any other storage error
)

// reasonOf names why a commit failed.
func reasonOf(err error) string {
	switch {
	case errors.Is(err, ErrSpoolFull):
		return ReasonSpoolFull
	case errors.Is(err, storage.ErrUnavailable), errors.Is(err, ErrClosed):
		return ReasonUnavailable
	}
	return ReasonStorage
}
