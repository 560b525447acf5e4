package clickhouse

import (
	"context"
	"slices"
	"strings"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
)

// Latest returns the latest values from telemetry_latest, except for keys whose
// latest value a delete retired: those come from telemetry (see schema.go).
func (s *Store) Latest(ctx context.Context, entityID uuid.UUID, keys []string) ([]kv.Entry, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if keys != nil && len(keys) == 0 {
		return nil, nil
	}
	retired, all, err := s.retired(ctx, entityID)
	if err != nil {
		return nil, err
	}
	var out []kv.Entry
	if all == 0 {
		// The common case: no delete touched a latest value of the entity.
		out, err = s.latestFromTable(ctx, entityID, keys, retired)
		if err != nil {
			return nil, err
		}
	}
	if all > 0 || len(retired) > 0 {
		var only []string
		if all == 0 {
			only = mapKeys(retired)
		}
		hist, err := s.latestFromHistory(ctx, entityID, keys, only, retired, all)
		if err != nil {
			return nil, err
		}
		out = append(out, hist...)
		slices.SortFunc(out, func(a, b kv.Entry) int { return strings.Compare(a.Key, b.Key) })
	}
	if keys == nil {
		return out, nil
	}
	// In the order of keys.
	byKey := make(map[string]kv.Entry, len(out))
	for _, e := range out {
		byKey[e.Key] = e
	}
	out = out[:0]
	for _, k := range keys {
		if e, ok := byKey[k]; ok {
			out = append(out, e)
			delete(byKey, k)
		}
	}
	return out, nil
}

// SeriesKeys lists the keys that have a latest value, sorted.
func (s *Store) SeriesKeys(ctx context.Context, entityID uuid.UUID) ([]string, error) {
	latest, err := s.Latest(ctx, entityID, nil)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range latest {
		keys = append(keys, e.Key)
	}
	return keys, nil
}

// retired reads the tombstones that retired latest values of the entity. It
// returns, per key, the version a point must exceed to count as the latest value
// (0: any remaining point), and the version of the newest all-keys tombstone, which
// retired every key (0: none).
func (s *Store) retired(ctx context.Context, entityID uuid.UUID) (map[string]uint64, uint64, error) {
	rows, err := s.conn.Query(ctx, `SELECT all_keys, key, ver, latest FROM `+s.table("telemetry_deletes")+`
		WHERE entity_id = toUUID(?) AND latest > 0 ORDER BY ver`, entityID.String())
	if err != nil {
		return nil, 0, fail("read tombstones", err)
	}
	defer rows.Close()
	var (
		all     uint64
		retired map[string]uint64
	)
	for rows.Next() {
		var (
			allKeys, mode uint8
			key           string
			ver           uint64
		)
		if err := rows.Scan(&allKeys, &key, &ver, &mode); err != nil {
			return nil, 0, fail("read tombstones", err)
		}
		// In ver order, so a newer tombstone overrides an older one.
		if allKeys != 0 {
			all = ver
			clear(retired)
			continue
		}
		if retired == nil {
			retired = map[string]uint64{}
		}
		if mode == latestRewrite {
			retired[key] = 0
		} else {
			retired[key] = ver
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fail("read tombstones", err)
	}
	return retired, all, nil
}

func mapKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

const latestColumns = `key, ts, type, bool_v, long_v, dbl_v, str_v, json_v`

// latestFromTable reads telemetry_latest; FINAL leaves the newest ts of each key.
func (s *Store) latestFromTable(ctx context.Context, entityID uuid.UUID, keys []string, skip map[string]uint64) ([]kv.Entry, error) {
	query := `SELECT ` + latestColumns + ` FROM ` + s.table("telemetry_latest") + ` FINAL WHERE entity_id = toUUID(?)`
	args := []any{entityID.String()}
	if keys != nil {
		query += ` AND key IN ?`
		args = append(args, groupSet(keys))
	}
	if len(skip) > 0 {
		query += ` AND key NOT IN ?`
		args = append(args, groupSet(mapKeys(skip)))
	}
	return s.queryLatest(ctx, query+` ORDER BY key`, args)
}

// latestFromHistory finds the newest surviving point of each key in telemetry,
// counting for a key in minVer only points with a larger ver, for other keys
// only points with a ver larger than def. With only set it looks at those keys.
func (s *Store) latestFromHistory(ctx context.Context, entityID uuid.UUID, keys, only []string, minVer map[string]uint64, def uint64) ([]kv.Entry, error) {
	with, args := s.withTombstones(entityID, nil)
	query := with + `SELECT ` + latestColumns + ` FROM ` + s.table("telemetry") + ` FINAL
		WHERE entity_id = toUUID(?) AND` + alive
	args = append(args, entityID.String())
	if len(minVer) == 0 {
		query += ` AND ver > ?`
		args = append(args, def)
	} else {
		// (key = 'a' AND ver > 1) OR … OR (key NOT IN ('a', …) AND ver > def)
		var cond []string
		for k, v := range minVer {
			cond = append(cond, `(key = ? AND ver > ?)`)
			args = append(args, k, v)
		}
		cond = append(cond, `(key NOT IN ? AND ver > ?)`)
		args = append(args, groupSet(mapKeys(minVer)), def)
		query += ` AND (` + strings.Join(cond, ` OR `) + `)`
	}
	if keys != nil {
		query += ` AND key IN ?`
		args = append(args, groupSet(keys))
	}
	if only != nil {
		query += ` AND key IN ?`
		args = append(args, groupSet(only))
	}
	return s.queryLatest(ctx, query+` ORDER BY key, ts DESC LIMIT 1 BY key`, args)
}

func (s *Store) queryLatest(ctx context.Context, query string, args []any) ([]kv.Entry, error) {
	rows, err := s.conn.Query(ctx, query, args...)
	if err != nil {
		return nil, fail("read latest values", err)
	}
	defer rows.Close()
	var out []kv.Entry
	for rows.Next() {
		var (
			e          kv.Entry
			typ, b     uint8
			l          int64
			d          float64
			str, jsonV string
		)
		if err := rows.Scan(&e.Key, &e.Ts, &typ, &b, &l, &d, &str, &jsonV); err != nil {
			return nil, fail("read latest values", err)
		}
		e.Value = value(typ, b, l, d, str, jsonV)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fail("read latest values", err)
	}
	return out, nil
}

func groupSet(keys []string) ch.GroupSet {
	vals := make([]any, len(keys))
	for i, k := range keys {
		vals[i] = k
	}
	return ch.GroupSet{Value: vals}
}
