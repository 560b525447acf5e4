package node

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/ingest"
	"github.com/sluice-iot/sluice/storage"
)

var _ ingest.Tally = (*engine.IngestStats)(nil)

// ingestStatsInterval is how often a node adds its per-device ingest counts to
// the shared counters: what a crash can lose, and how far GET
// /api/device/{id}/ingestStats lags.
const ingestStatsInterval = time.Second

func (n *Node) startIngestStats() {
	if c, ok := n.store.(storage.Counters); ok {
		n.stats.Start(c, ingestStatsInterval, n.log)
	}
}

// closeIngestStats runs after the writer has closed: it closes the spool first
// (its last deliveries count as stored; closing it again with the store is a
// no-op), then adds the last counts while the store is still open.
func (n *Node) closeIngestStats() error {
	var err error
	if sp := n.backend.spool; sp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = sp.Close(ctx)
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(err, n.stats.Close(ctx))
}
