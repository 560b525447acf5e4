package redis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// Latest values live in Redis in production so that they are visible the moment a
// write is acknowledged, while history reaches ClickHouse through the spool a
// second later. One hash per entity ({l:<entity>}: one cluster slot), field = key,
// value = encodeValue (type, ts, payload).

// updateLatestScript sets each field only when its ts is not older than the stored
// one (equal ts: the later write wins). ARGV holds key, ts, value triples.
// Redis Lua numbers are doubles: timestamps are exact up to 2^53 ms.
var updateLatestScript = goredis.NewScript(`
for i = 1, #ARGV, 3 do
  local old = redis.call('HGET', KEYS[1], ARGV[i])
  if (not old) or tonumber(ARGV[i+1]) >= struct.unpack('>i8', old, 2) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+2])
  end
end
return 0`)

type entityKey struct {
	e uuid.UUID
	k string
}

var newestPool = sync.Pool{New: func() any { return make(map[entityKey]int) }}

func (s *Store) latestKey(entity uuid.UUID) string { return s.prefix + "{l:" + entity.String() + "}" }

// UpdateLatest makes each row the latest value of its (entity, key) unless a newer
// one is stored. Rows of many entities go in one pipeline, one script per entity.
func (s *Store) UpdateLatest(ctx context.Context, rows []storage.Row) error {
	if len(rows) == 0 {
		return nil
	}
	if err := s.check(); err != nil {
		return err
	}
	// Keep the newest row per (entity, key) of this batch; later rows win ties.
	// A group commit holds up to 10,000 rows of usually a few series: the map
	// starts small and comes from a pool, not sized by the row count.
	newest := newestPool.Get().(map[entityKey]int)
	defer func() {
		clear(newest)
		newestPool.Put(newest)
	}()
	for i := range rows {
		k := entityKey{rows[i].EntityID, rows[i].Key}
		if j, ok := newest[k]; !ok || rows[i].Ts >= rows[j].Ts {
			newest[k] = i
		}
	}
	args := make(map[uuid.UUID][]any)
	for k, i := range newest {
		args[k.e] = append(args[k.e], k.k, strconv.FormatInt(rows[i].Ts, 10), encodeValue(rows[i].Entry))
	}
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for e, a := range args {
			updateLatestScript.Eval(ctx, p, []string{s.latestKey(e)}, a...)
		}
		return nil
	})
	if err != nil {
		return fail("update latest values", err)
	}
	return nil
}

// LatestValues returns the latest value of each of keys that exists, in the order
// of keys; keys == nil means all, sorted by key.
func (s *Store) LatestValues(ctx context.Context, entityID uuid.UUID, keys []string) ([]kv.Entry, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out, err := s.readHash(ctx, s.latestKey(entityID), keys, "read latest values of "+entityID.String())
	if err != nil || keys != nil {
		return out, err
	}
	slices.SortFunc(out, func(a, b kv.Entry) int { return cmp.Compare(a.Key, b.Key) })
	return out, nil
}

// LatestKeys lists the keys with a latest value, sorted.
func (s *Store) LatestKeys(ctx context.Context, entityID uuid.UUID) ([]string, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	keys, err := s.rdb.HKeys(ctx, s.latestKey(entityID)).Result()
	if err != nil {
		return nil, fail(fmt.Sprintf("list latest keys of %s", entityID), err)
	}
	slices.Sort(keys)
	return keys, nil
}

// DeleteLatest removes the latest values of keys; keys == nil removes all of them.
func (s *Store) DeleteLatest(ctx context.Context, entityID uuid.UUID, keys []string) error {
	if err := s.check(); err != nil {
		return err
	}
	var err error
	if keys == nil {
		err = s.rdb.Del(ctx, s.latestKey(entityID)).Err()
	} else if len(keys) > 0 {
		err = s.rdb.HDel(ctx, s.latestKey(entityID), keys...).Err()
	}
	if err != nil {
		return fail(fmt.Sprintf("delete latest values of %s", entityID), err)
	}
	return nil
}
