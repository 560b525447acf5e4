package redis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-iot/sluice/internal/series"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// Latest values live in Redis in production so that they are visible the moment a
// write is acknowledged, while history reaches ClickHouse through the spool a
// second later. One hash per entity ({l:<entity>}: one cluster slot), field = key,
// value = encodeValue (type, ts, payload).

// updateLatestScript sets each field only when its ts is not older than the stored
// one (equal ts: the later write wins). ARGV holds key, ts, value, least-ts,
// version quintuples: ts and value are the newest row of the key in the write,
// least-ts its oldest ts, version its history version (20 digits, or empty).
// A row older than a recent delete of its key whose range holds its ts (KEYS[2],
// deleteLatestInScript) is not set: history hides it. It returns 1 when some
// key's oldest ts is not newer than the stored one: that write may repeat a
// point written before (see UpdateLatest). Redis Lua numbers are doubles:
// timestamps are exact up to 2^53 ms; versions compare as equal-length text.
var updateLatestScript = goredis.NewScript(`
local repeats = 0
local marked = redis.call('EXISTS', KEYS[2]) == 1
for i = 1, #ARGV, 5 do
  local ts = tonumber(ARGV[i+1])
  local hidden = false
  if marked and ARGV[i+4] ~= '' then
    local m = redis.call('HGET', KEYS[2], ARGV[i])
    if m then
      local ver, from, to = string.match(m, '^(%d+)|(-?%d+)|(-?%d+)$')
      hidden = ver ~= nil and ARGV[i+4] < ver and ts >= tonumber(from) and ts < tonumber(to)
    end
  end
  local old = redis.call('HGET', KEYS[1], ARGV[i])
  local oldTs = old and struct.unpack('>i8', old, 2)
  if old and tonumber(ARGV[i+3]) <= oldTs then
    repeats = 1
  end
  if not hidden and ((not old) or ts >= oldTs) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+2])
  end
end
return repeats`)

// deleteLatestInScript removes each field of ARGV[5..] whose ts lies in
// [ARGV[1], ARGV[2]) and returns those it removed: read and delete in one step,
// so a newer value another node writes meanwhile is not deleted with them. With
// a version (ARGV[3], 20 digits, or empty) it also leaves, for ARGV[4] ms, a
// mark per key in KEYS[2]: a write older than the delete but still in flight
// (its row hidden in history) must not make its value the latest afterwards.
var deleteLatestInScript = goredis.NewScript(`
local gone = {}
local from, to = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 5, #ARGV do
  local old = redis.call('HGET', KEYS[1], ARGV[i])
  if old then
    local ts = struct.unpack('>i8', old, 2)
    if ts >= from and ts < to then
      redis.call('HDEL', KEYS[1], ARGV[i])
      gone[#gone + 1] = ARGV[i]
    end
  end
  if ARGV[3] ~= '' then
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[3] .. '|' .. ARGV[1] .. '|' .. ARGV[2])
  end
end
if ARGV[3] ~= '' then
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
return gone`)

// deleteMarkTTL is how long a delete's marks stay: far longer than a write is
// in flight between its versions and its latest values (a spool fsync and a
// Redis round trip, bounded by the request's lifetime).
const deleteMarkTTL = 10 * time.Minute

func (s *Store) latestKey(entity uuid.UUID) string { return s.prefix + "{l:" + entity.String() + "}" }

// markKey holds an entity's recent deletes of latest values, in the latest
// hash's cluster slot.
func (s *Store) markKey(entity uuid.UUID) string { return s.prefix + "{l:" + entity.String() + "}d" }

// versionArg is a history version as the scripts compare it: 20 digits, so
// that text order is number order; 0 (none) is empty.
func versionArg(v uint64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf("%020d", v)
}

// UpdateLatest makes each row the latest value of its (entity, key) unless a newer
// one is stored. Rows of many entities go in one pipeline, one script per entity.
//
// It returns the entities whose rows may repeat a point written before: a key
// with two rows of one ts in the write, or whose oldest ts in the write is not
// newer than its stored latest value. The rows of every other entity are points
// never written before, which is what lets ClickHouse reports read them without
// FINAL (storage/clickhouse WriteHistory). The check is atomic per entity, so of
// two nodes writing the same point at once one sees the other's.
func (s *Store) UpdateLatest(ctx context.Context, rows []storage.Row, vers []uint64) ([]uuid.UUID, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	// Per (entity, key) of this batch: the newest row (later rows win ties), the
	// oldest ts, and whether its ts only rose. A group commit holds up to 10,000
	// rows of usually a few series; the index and spans come from a pool.
	b := spansPool.Get().(*spans)
	defer func() {
		b.index.Reset()
		b.list = b.list[:0]
		spansPool.Put(b)
	}()
	for i := range rows {
		r := &rows[i]
		j, added := b.index.Of(r.EntityID, r.Key)
		if added {
			b.list = append(b.list, seriesSpan{newest: i, least: r.Ts, last: r.Ts, rising: true})
			continue
		}
		sp := &b.list[j]
		sp.rising = sp.rising && r.Ts > sp.last
		sp.last = r.Ts
		sp.least = min(sp.least, r.Ts)
		if r.Ts >= rows[sp.newest].Ts {
			sp.newest = i
		}
	}
	var repeats []uuid.UUID
	args := make(map[uuid.UUID][]any)
	for _, sp := range b.list {
		r := &rows[sp.newest]
		ver := ""
		if vers != nil {
			ver = versionArg(vers[sp.newest])
		}
		args[r.EntityID] = append(args[r.EntityID], r.Key, strconv.FormatInt(r.Ts, 10), encodeValue(r.Entry), strconv.FormatInt(sp.least, 10), ver)
	}
	results := make(map[uuid.UUID]*goredis.Cmd, len(args))
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for e, a := range args {
			results[e] = updateLatestScript.Eval(ctx, p, []string{s.latestKey(e), s.markKey(e)}, a...)
		}
		return nil
	})
	if err != nil {
		return nil, fail("update latest values", err)
	}
	for e, c := range results {
		if n, _ := c.Int(); n != 0 {
			repeats = append(repeats, e)
		}
	}
	// A series whose ts did not only rise may hold one ts twice. Looking costs a
	// scan of the rows per series, so only for entities not already repeating:
	// rows from concurrent requests of one device interleave in a group commit,
	// and then usually reach below the stored latest ts too.
	for j, sp := range b.list {
		if k := b.index.Key(j); !sp.rising && !slices.Contains(repeats, k.Entity) && twice(rows, k) {
			repeats = append(repeats, k.Entity)
		}
	}
	return repeats, nil
}

// seriesSpan is what UpdateLatest gathers about one (entity, key) of a write.
type seriesSpan struct {
	newest      int   // index of the newest row
	least, last int64 // the oldest ts, and the ts of the last row seen
	rising      bool  // every row's ts was above the one before
}

// spans is UpdateLatest's scratch: list[j] is what it gathered of series j.
type spans struct {
	index series.Index
	list  []seriesSpan
}

var spansPool = sync.Pool{New: func() any { return new(spans) }}

// twice reports whether two rows of the series k share a ts: the slow path for a
// series whose rows were not in rising ts order.
func twice(rows []storage.Row, k series.Key) bool {
	var ts []int64
	for i := range rows {
		if rows[i].EntityID == k.Entity && rows[i].Key == k.Name {
			ts = append(ts, rows[i].Ts)
		}
	}
	slices.Sort(ts)
	for i := 1; i < len(ts); i++ {
		if ts[i] == ts[i-1] {
			return true
		}
	}
	return false
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

// DeleteLatestIn removes the latest values of those of keys whose ts lies in
// [startTs, endTs) and returns their keys, in one step per entity. Timestamps
// compare as Lua doubles: exact up to 2^53 ms.
func (s *Store) DeleteLatestIn(ctx context.Context, entityID uuid.UUID, keys []string, startTs, endTs int64, ver uint64) ([]string, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(keys) == 0 || endTs <= startTs {
		return nil, nil
	}
	args := make([]any, 0, 4+len(keys))
	args = append(args, strconv.FormatInt(startTs, 10), strconv.FormatInt(endTs, 10), versionArg(ver),
		strconv.FormatInt(deleteMarkTTL.Milliseconds(), 10))
	for _, k := range keys {
		args = append(args, k)
	}
	gone, err := deleteLatestInScript.Run(ctx, s.rdb, []string{s.latestKey(entityID), s.markKey(entityID)}, args...).StringSlice()
	if err != nil {
		return nil, fail(fmt.Sprintf("delete latest values of %s", entityID), err)
	}
	return gone, nil
}

// rewriteKey lists the series (entity/key) whose latest values a delete
// rewrote from history lately, each scored with when it stops counting (unix ms).
func (s *Store) rewriteKey() string { return s.prefix + "{rw}" }

// rewriteTTL keeps an entity listed a little shorter than the delete's marks
// last: a row reapplied after the marks are gone could bring back a deleted
// value (ingest.ReapplyLatest).
const rewriteTTL = deleteMarkTTL - time.Minute

// NoteRewrite lists the entity's keys as rewritten for rewriteTTL.
func (s *Store) NoteRewrite(ctx context.Context, entityID uuid.UUID, keys []string) error {
	if err := s.check(); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	now := time.Now().UnixMilli()
	until := float64(now + rewriteTTL.Milliseconds())
	members := make([]goredis.Z, len(keys))
	for i, k := range keys {
		members[i] = goredis.Z{Score: until, Member: entityID.String() + "/" + k}
	}
	p := s.rdb.TxPipeline()
	p.ZAdd(ctx, s.rewriteKey(), members...)
	p.ZRemRangeByScore(ctx, s.rewriteKey(), "-inf", strconv.FormatInt(now, 10))
	p.PExpire(ctx, s.rewriteKey(), rewriteTTL)
	if _, err := p.Exec(ctx); err != nil {
		return fail(fmt.Sprintf("note the rewrite of %s", entityID), err)
	}
	return nil
}

// ReapplyLatest applies, of rows, those of keys listed by NoteRewrite:
// per key the newest row no delete mark hides becomes the latest value
// unless a newer one is stored. Rows of other keys are left, so a delivery
// that holds none costs one round trip.
func (s *Store) ReapplyLatest(ctx context.Context, rows []storage.Row, vers []uint64) error {
	if err := s.check(); err != nil {
		return err
	}
	listed, err := s.rewrittenAmong(ctx, rows)
	if err != nil || len(listed) == 0 {
		return err
	}
	rewritten := make(map[uuid.UUID][]string, len(listed))
	for _, m := range listed {
		id, key, ok := strings.Cut(m, "/") // a uuid holds no "/"; a key may
		if u, err := uuid.Parse(id); ok && err == nil {
			rewritten[u] = append(rewritten[u], key)
		}
	}
	var pick []int
	entities := map[uuid.UUID]*goredis.MapStringStringCmd{}
	for i := range rows {
		if keys, ok := rewritten[rows[i].EntityID]; ok && slices.Contains(keys, rows[i].Key) {
			pick = append(pick, i)
			entities[rows[i].EntityID] = nil
		}
	}
	if len(pick) == 0 {
		return nil
	}
	// The marks first: UpdateLatest sends only the newest row of a key, so a
	// newest row the delete hides must not stand for the older ones it does not.
	if _, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for e := range entities {
			entities[e] = p.HGetAll(ctx, s.markKey(e))
		}
		return nil
	}); err != nil {
		return fail("read delete marks", err)
	}
	var sub []storage.Row
	var subVers []uint64
	for _, i := range pick {
		var ver uint64
		if vers != nil {
			ver = vers[i]
		}
		if hiddenBy(entities[rows[i].EntityID].Val()[rows[i].Key], rows[i].Ts, ver) {
			continue
		}
		sub = append(sub, rows[i])
		if vers != nil {
			subVers = append(subVers, ver)
		}
	}
	_, err = s.UpdateLatest(ctx, sub, subVers)
	return err
}

// rewriteListMax is how many noted series ReapplyLatest reads whole; past it,
// it asks only for the series of the delivery.
const rewriteListMax = 1000

// rewrittenAmong returns the noted series ("entity/key") that may concern
// rows: nothing at the cost of one ZCARD when none is noted (the usual case),
// else every live one, or when many are, those of rows that are live.
func (s *Store) rewrittenAmong(ctx context.Context, rows []storage.Row) ([]string, error) {
	n, err := s.rdb.ZCard(ctx, s.rewriteKey()).Result()
	if err != nil {
		return nil, fail("count rewritten series", err)
	}
	if n == 0 {
		return nil, nil
	}
	now := time.Now().UnixMilli()
	if n <= rewriteListMax {
		listed, err := s.rdb.ZRangeByScore(ctx, s.rewriteKey(), &goredis.ZRangeBy{
			Min: "(" + strconv.FormatInt(now, 10), Max: "+inf"}).Result()
		if err != nil {
			return nil, fail("list rewritten series", err)
		}
		return listed, nil
	}
	seen := map[string]bool{}
	var members []string
	for i := range rows {
		m := rows[i].EntityID.String() + "/" + rows[i].Key
		if !seen[m] {
			seen[m] = true
			members = append(members, m)
		}
	}
	scores, err := s.rdb.ZMScore(ctx, s.rewriteKey(), members...).Result()
	if err != nil {
		return nil, fail("look up rewritten series", err)
	}
	var live []string
	for i, sc := range scores {
		if sc > float64(now) {
			live = append(live, members[i])
		}
	}
	return live, nil
}

// hiddenBy tells whether a delete mark (deleteLatestInScript's
// "version|from|to") hides a row of ts and history version ver, as
// updateLatestScript decides it.
func hiddenBy(mark string, ts int64, ver uint64) bool {
	if mark == "" || ver == 0 {
		return false
	}
	parts := strings.Split(mark, "|")
	if len(parts) != 3 {
		return false
	}
	from, err1 := strconv.ParseInt(parts[1], 10, 64)
	to, err2 := strconv.ParseInt(parts[2], 10, 64)
	return err1 == nil && err2 == nil && versionArg(ver) < parts[0] && ts >= from && ts < to
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
