package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-iot/sluice/storage"
)

// Counters are one hash per entity, P{c:<entity>}: name → integer. HINCRBY adds
// atomically on the server, so the nodes of a cluster never read-modify-write.

var _ storage.Counters = (*Store)(nil)

func (s *Store) counterKey(entity uuid.UUID) string {
	return s.prefix + "{c:" + entity.String() + "}"
}

// AddCounters sends one HINCRBY per delta in one pipeline (split by slot on a
// cluster). When some commands fail it returns a *storage.FailedDeltasError
// with just those deltas.
func (s *Store) AddCounters(ctx context.Context, deltas []storage.CounterDelta) error {
	if len(deltas) == 0 {
		return nil
	}
	if err := s.check(); err != nil {
		return err
	}
	cmds := make([]*goredis.IntCmd, len(deltas))
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, c := range deltas {
			cmds[i] = p.HIncrBy(ctx, s.counterKey(c.EntityID), c.Name, c.Delta)
		}
		return nil
	})
	if err == nil {
		return nil
	}
	var failed []storage.CounterDelta
	for i, c := range cmds {
		if c.Err() != nil {
			failed = append(failed, deltas[i])
		}
	}
	return &storage.FailedDeltasError{Failed: failed, Err: fail(fmt.Sprintf("add %d counters", len(deltas)), err)}
}

// DeleteCounters deletes the entity's hash.
func (s *Store) DeleteCounters(ctx context.Context, entityID uuid.UUID) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := s.rdb.Del(ctx, s.counterKey(entityID)).Err(); err != nil {
		return fail("delete counters of "+entityID.String(), err)
	}
	return nil
}

// Counters reads the entity's hash.
func (s *Store) Counters(ctx context.Context, entityID uuid.UUID) (map[string]int64, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	m, err := s.rdb.HGetAll(ctx, s.counterKey(entityID)).Result()
	if err != nil {
		return nil, fail("read counters of "+entityID.String(), err)
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redis: counter %q of %s is not an integer: %q", k, entityID, v)
		}
		out[k] = n
	}
	return out, nil
}
