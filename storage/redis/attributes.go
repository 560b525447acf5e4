package redis

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

var scopes = []storage.Scope{storage.ClientScope, storage.SharedScope, storage.ServerScope}

// SaveAttributes creates or replaces attributes in one HSET.
func (s *Store) SaveAttributes(ctx context.Context, entityID uuid.UUID, scope storage.Scope, attrs []kv.Entry) error {
	if len(attrs) == 0 {
		return nil
	}
	if err := s.check(); err != nil {
		return err
	}
	args := make([]any, 0, 2*len(attrs))
	for _, a := range attrs {
		args = append(args, a.Key, encodeValue(a))
	}
	if err := s.rdb.HSet(ctx, s.attrKey(entityID, scope), args...).Err(); err != nil {
		return fail(fmt.Sprintf("save attributes of %s", entityID), err)
	}
	return nil
}

// SaveAttributesOf saves the attributes of many entities in one pipeline.
func (s *Store) SaveAttributesOf(ctx context.Context, scope storage.Scope, writes []storage.EntityAttributes) error {
	if len(writes) == 0 {
		return nil
	}
	if err := s.check(); err != nil {
		return err
	}
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, w := range writes {
			if len(w.Attrs) == 0 {
				continue
			}
			args := make([]any, 0, 2*len(w.Attrs))
			for _, a := range w.Attrs {
				args = append(args, a.Key, encodeValue(a))
			}
			p.HSet(ctx, s.attrKey(w.EntityID, scope), args...)
		}
		return nil
	})
	if err != nil {
		return fail(fmt.Sprintf("save the attributes of %d entities", len(writes)), err)
	}
	return nil
}

// GetAttributes returns the attributes of keys that exist (all with keys == nil),
// sorted by key.
func (s *Store) GetAttributes(ctx context.Context, entityID uuid.UUID, scope storage.Scope, keys []string) ([]kv.Entry, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out, err := s.readHash(ctx, s.attrKey(entityID, scope), keys, "get attributes of "+entityID.String())
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b kv.Entry) int { return strings.Compare(a.Key, b.Key) })
	return slices.CompactFunc(out, func(a, b kv.Entry) bool { return a.Key == b.Key }), nil
}

// DeleteAttributes removes keys in one MULTI/EXEC and returns those that existed.
func (s *Store) DeleteAttributes(ctx context.Context, entityID uuid.UUID, scope storage.Scope, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	key := s.attrKey(entityID, scope)
	dels := make([]*goredis.IntCmd, len(keys))
	_, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		for i, k := range keys {
			dels[i] = p.HDel(ctx, key, k)
		}
		return nil
	})
	if err != nil {
		return nil, fail(fmt.Sprintf("delete attributes of %s", entityID), err)
	}
	var deleted []string
	for i, d := range dels {
		if d.Val() > 0 {
			deleted = append(deleted, keys[i])
		}
	}
	slices.Sort(deleted)
	return deleted, nil
}

// DeleteEntityAttributes removes the hashes of all scopes; they share a slot.
func (s *Store) DeleteEntityAttributes(ctx context.Context, entityID uuid.UUID) error {
	if err := s.check(); err != nil {
		return err
	}
	keys := make([]string, len(scopes))
	for i, sc := range scopes {
		keys[i] = s.attrKey(entityID, sc)
	}
	if err := s.rdb.Del(ctx, keys...).Err(); err != nil {
		return fail(fmt.Sprintf("delete attributes of %s", entityID), err)
	}
	return nil
}

// An attribute is stored as its kv.Type (1 byte), its Ts (8 bytes, big endian),
// then the value: 1 byte for a Bool, 8 for a Long or a Double (IEEE bits), the
// text of a String or JSON.
func encodeValue(e kv.Entry) []byte {
	b := make([]byte, 9, 17+len(e.Value.Str))
	b[0] = byte(e.Value.Type)
	binary.BigEndian.PutUint64(b[1:], uint64(e.Ts))
	switch e.Value.Type {
	case kv.Bool:
		if e.Value.Bool {
			return append(b, 1)
		}
		return append(b, 0)
	case kv.Long:
		return binary.BigEndian.AppendUint64(b, uint64(e.Value.Long))
	case kv.Double:
		return binary.BigEndian.AppendUint64(b, math.Float64bits(e.Value.Double))
	}
	return append(b, e.Value.Str...)
}

func decodeValue(key, raw string) (kv.Entry, error) {
	if len(raw) < 9 {
		return kv.Entry{}, fmt.Errorf("redis: corrupt attribute %q: %d bytes", key, len(raw))
	}
	e := kv.Entry{Key: key, Ts: int64(binary.BigEndian.Uint64([]byte(raw[1:9])))}
	p := raw[9:]
	switch t := kv.Type(raw[0]); t {
	case kv.Bool:
		if len(p) != 1 {
			return kv.Entry{}, fmt.Errorf("redis: corrupt bool attribute %q", key)
		}
		e.Value = kv.BoolValue(p[0] != 0)
	case kv.Long, kv.Double:
		if len(p) != 8 {
			return kv.Entry{}, fmt.Errorf("redis: corrupt %s attribute %q", t, key)
		}
		n := binary.BigEndian.Uint64([]byte(p))
		e.Value = kv.LongValue(int64(n))
		if t == kv.Double {
			e.Value = kv.DoubleValue(math.Float64frombits(n))
		}
	case kv.String:
		e.Value = kv.StringValue(p)
	case kv.JSON:
		e.Value = kv.JSONValue(p)
	default:
		return kv.Entry{}, fmt.Errorf("redis: corrupt attribute %q: type %d", key, t)
	}
	return e, nil
}

// readHash decodes the fields of a value hash: all of them (in no order) when keys
// is nil, else those of keys that exist, in the order of keys.
func (s *Store) readHash(ctx context.Context, key string, keys []string, what string) ([]kv.Entry, error) {
	var out []kv.Entry
	if keys == nil {
		all, err := s.rdb.HGetAll(ctx, key).Result()
		if err != nil {
			return nil, fail(what, err)
		}
		for k, raw := range all {
			e, err := decodeValue(k, raw)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	if len(keys) == 0 {
		return nil, nil
	}
	vals, err := s.rdb.HMGet(ctx, key, keys...).Result()
	if err != nil {
		return nil, fail(what, err)
	}
	for i, v := range vals {
		raw, ok := v.(string)
		if !ok {
			continue
		}
		e, err := decodeValue(keys[i], raw)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}
