package redis

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-iot/sluice/storage"
)

// putBody creates or replaces a record. KEYS: record, its unique list, the
// kind's unique index, the kind's owner set. ARGV: id, owner, data, then from
// ARGV[first] the unique values. It checks every value before it changes
// anything, and a script runs alone, so a conflict leaves everything as it was.
// Returns 0 on a conflict.
const putBody = `
local id = ARGV[1]
for i = first, #ARGV do
	local holder = redis.call('HGET', KEYS[3], ARGV[i])
	if holder and holder ~= id then return 0 end
end
local old = redis.call('HGET', KEYS[1], 'o')
if old then
	redis.call('ZREM', KEYS[4], old .. id)
	for _, u in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
		if redis.call('HGET', KEYS[3], u) == id then redis.call('HDEL', KEYS[3], u) end
	end
	redis.call('DEL', KEYS[2])
end
redis.call('HSET', KEYS[1], 'o', ARGV[2], 'd', ARGV[3])
for i = first, #ARGV do
	redis.call('HSET', KEYS[3], ARGV[i], id)
	redis.call('RPUSH', KEYS[2], ARGV[i])
end
redis.call('ZADD', KEYS[4], 0, ARGV[2] .. id)
return 1
`

// putScript is putBody with the unique values from ARGV[4].
var putScript = goredis.NewScript("local first = 4" + putBody)

// replaceScript is putBody on a condition: ARGV[4] is the data the record must
// still hold, and the unique values follow. Returns -1 when the record is gone,
// -2 when its data changed.
var replaceScript = goredis.NewScript(`local first = 5
local cur = redis.call('HGET', KEYS[1], 'd')
if not cur then return -1 end
if cur ~= ARGV[4] then return -2 end` + putBody)

// deleteScript removes a record and releases its values; same KEYS, ARGV: id.
// Returns 0 when the record does not exist.
var deleteScript = goredis.NewScript(`
local id = ARGV[1]
local old = redis.call('HGET', KEYS[1], 'o')
if not old then return 0 end
redis.call('ZREM', KEYS[4], old .. id)
for _, u in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
	if redis.call('HGET', KEYS[3], u) == id then redis.call('HDEL', KEYS[3], u) end
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
`)

func (s *Store) recordKeys(kind string, id uuid.UUID) []string {
	return []string{s.recordKey(kind, id), s.recordUniqueKey(kind, id), s.uniqueKey(kind), s.ownersKey(kind)}
}

// Put creates or replaces the record atomically (see putBody).
func (s *Store) Put(ctx context.Context, r storage.Record) error {
	return s.put(ctx, r, nil)
}

// Replace implements storage.Entities (see replaceScript).
func (s *Store) Replace(ctx context.Context, r storage.Record, prev []byte) error {
	return s.put(ctx, r, &prev)
}

// put runs putScript, or replaceScript over *prev.
func (s *Store) put(ctx context.Context, r storage.Record, prev *[]byte) error {
	if err := s.check(); err != nil {
		return err
	}
	script := putScript
	args := make([]any, 0, 4+len(r.Unique))
	args = append(args, string(r.ID[:]), string(r.Owner[:]), r.Data)
	if prev != nil {
		script = replaceScript
		args = append(args, *prev)
	}
	for _, u := range r.Unique {
		args = append(args, u)
	}
	res, err := script.Run(ctx, s.rdb, s.recordKeys(r.Kind, r.ID), args...).Int()
	if err != nil {
		return fail(fmt.Sprintf("put %s %s", r.Kind, r.ID), err)
	}
	switch res {
	case 0:
		return fmt.Errorf("cannot put %s %s: %w", r.Kind, r.ID, storage.ErrConflict)
	case -1:
		return fmt.Errorf("cannot replace %s %s: %w", r.Kind, r.ID, storage.ErrNotFound)
	case -2:
		return fmt.Errorf("cannot replace %s %s: %w", r.Kind, r.ID, storage.ErrChanged)
	}
	return nil
}

// Get returns the record of (kind, id), or storage.ErrNotFound.
func (s *Store) Get(ctx context.Context, kind string, id uuid.UUID) (storage.Record, error) {
	if err := s.check(); err != nil {
		return storage.Record{}, err
	}
	// MULTI/EXEC: the fields and the unique list of one version.
	var fields *goredis.SliceCmd
	var unique *goredis.StringSliceCmd
	_, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		fields = p.HMGet(ctx, s.recordKey(kind, id), "o", "d")
		unique = p.LRange(ctx, s.recordUniqueKey(kind, id), 0, -1)
		return nil
	})
	if err != nil {
		return storage.Record{}, fail(fmt.Sprintf("get %s %s", kind, id), err)
	}
	return record(kind, id, fields.Val(), unique.Val())
}

// record builds a Record from HMGET o d and the unique list.
func record(kind string, id uuid.UUID, fields []any, unique []string) (storage.Record, error) {
	owner, ok := fields[0].(string)
	if !ok {
		return storage.Record{}, fmt.Errorf("%s %s: %w", kind, id, storage.ErrNotFound)
	}
	data, _ := fields[1].(string)
	r := storage.Record{Kind: kind, ID: id, Data: []byte(data)}
	copy(r.Owner[:], owner)
	if len(unique) > 0 {
		r.Unique = unique
	}
	return r, nil
}

// Lookup returns the record that holds the unique value, or storage.ErrNotFound.
func (s *Store) Lookup(ctx context.Context, kind, unique string) (storage.Record, error) {
	if err := s.check(); err != nil {
		return storage.Record{}, err
	}
	// The index and the record are read in two steps; a record that lost the value
	// in between is looked up again.
	for range 3 {
		raw, err := s.rdb.HGet(ctx, s.uniqueKey(kind), unique).Result()
		if errors.Is(err, goredis.Nil) {
			return storage.Record{}, fmt.Errorf("%s: %w", kind, storage.ErrNotFound)
		}
		if err != nil {
			return storage.Record{}, fail("look up "+kind, err)
		}
		id, err := uuid.FromBytes([]byte(raw))
		if err != nil {
			return storage.Record{}, fmt.Errorf("redis: corrupt unique index of %s: %w", kind, err)
		}
		r, err := s.Get(ctx, kind, id)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return storage.Record{}, err
		}
		for _, u := range r.Unique {
			if u == unique {
				return r, nil
			}
		}
	}
	return storage.Record{}, fmt.Errorf("%s: %w", kind, storage.ErrNotFound)
}

// List returns the records of kind with the owner in ascending ID order.
func (s *Store) List(ctx context.Context, kind string, owner uuid.UUID) ([]storage.Record, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	// Members are <owner><id>; all ids of the owner lie between these bounds.
	lo := "[" + string(owner[:])
	hi := "[" + string(owner[:]) + string(bytes16(0xff))
	members, err := s.rdb.ZRangeByLex(ctx, s.ownersKey(kind), &goredis.ZRangeBy{Min: lo, Max: hi}).Result()
	if err != nil {
		return nil, fail(fmt.Sprintf("list %s of %s", kind, owner), err)
	}
	if len(members) == 0 {
		return nil, nil
	}
	ids := make([]uuid.UUID, 0, len(members))
	for _, m := range members {
		if len(m) != 32 {
			continue
		}
		ids = append(ids, uuid.UUID([]byte(m[16:])))
	}
	fields := make([]*goredis.SliceCmd, len(ids))
	unique := make([]*goredis.StringSliceCmd, len(ids))
	_, err = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, id := range ids {
			fields[i] = p.HMGet(ctx, s.recordKey(kind, id), "o", "d")
			unique[i] = p.LRange(ctx, s.recordUniqueKey(kind, id), 0, -1)
		}
		return nil
	})
	if err != nil {
		return nil, fail(fmt.Sprintf("list %s of %s", kind, owner), err)
	}
	out := make([]storage.Record, 0, len(ids))
	for i, id := range ids {
		r, err := record(kind, id, fields[i].Val(), unique[i].Val())
		// Deleted or moved since the range was read.
		if err != nil || r.Owner != owner {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// Count returns how many records of kind the owner has: one ZLEXCOUNT over
// the range List reads, O(log n).
func (s *Store) Count(ctx context.Context, kind string, owner uuid.UUID) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	lo := "[" + string(owner[:])
	hi := "[" + string(owner[:]) + string(bytes16(0xff))
	n, err := s.rdb.ZLexCount(ctx, s.ownersKey(kind), lo, hi).Result()
	if err != nil {
		return 0, fail(fmt.Sprintf("count %s of %s", kind, owner), err)
	}
	return int(n), nil
}

func bytes16(b byte) []byte {
	out := make([]byte, 16)
	for i := range out {
		out[i] = b
	}
	return out
}

// Delete removes the record and releases its unique values.
func (s *Store) Delete(ctx context.Context, kind string, id uuid.UUID) error {
	if err := s.check(); err != nil {
		return err
	}
	ok, err := deleteScript.Run(ctx, s.rdb, s.recordKeys(kind, id), string(id[:])).Int()
	if err != nil {
		return fail(fmt.Sprintf("delete %s %s", kind, id), err)
	}
	if ok == 0 {
		return fmt.Errorf("%s %s: %w", kind, id, storage.ErrNotFound)
	}
	return nil
}
