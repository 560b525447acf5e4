package clickhouse

import (
	"context"
	"math"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/version"
	"github.com/sluice-iot/sluice/storage"
)

// Values of telemetry_deletes.latest.
const (
	latestKept    = 0 // the latest value stays
	latestDelete  = 1 // the latest value goes; points written later can replace it
	latestRewrite = 2 // the newest remaining point becomes the latest value
)

// DeleteSeries writes one tombstone per key (see schema.go); history reads skip
// the covered points at once. With DeleteLatest it first reads the latest values
// to find the keys whose latest ts lies in the range.
func (s *Store) DeleteSeries(ctx context.Context, q storage.DeleteQuery) error {
	if err := s.check(); err != nil {
		return err
	}
	if len(q.Keys) == 0 || q.EndTs <= q.StartTs {
		return nil
	}
	inRange := map[string]bool{}
	if q.DeleteLatest {
		latest, err := s.Latest(ctx, q.EntityID, q.Keys)
		if err != nil {
			return err
		}
		for _, e := range latest {
			inRange[e.Key] = e.Ts >= q.StartTs && e.Ts < q.EndTs
		}
	}
	ver := q.Version
	if ver == 0 {
		ver = version.Reserve(1)
	}
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.table("telemetry_deletes")+
		" (entity_id, key, all_keys, start_ts, end_ts, ver, latest)")
	if err != nil {
		return fail("prepare tombstones", err)
	}
	defer b.Abort()
	for _, k := range q.Keys {
		mode := uint8(latestKept)
		if inRange[k] {
			mode = latestDelete
			if q.RewriteLatest {
				mode = latestRewrite
			}
		}
		if err := b.Append(q.EntityID, k, uint8(0), q.StartTs, q.EndTs, ver, mode); err != nil {
			return fail("fill tombstones", err)
		}
	}
	if err := b.Send(); err != nil {
		return fail("write tombstones", err)
	}
	return nil
}

// DeleteEntitySeries writes one tombstone covering every key and ts of the entity.
func (s *Store) DeleteEntitySeries(ctx context.Context, entityID uuid.UUID) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.insertRow(ctx, "telemetry_deletes", " (entity_id, key, all_keys, start_ts, end_ts, ver, latest)",
		entityID, "", uint8(1), int64(math.MinInt64), int64(math.MaxInt64), version.Reserve(1), uint8(latestDelete))
}
