package clickhouse

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// tombstones is a WITH clause binding "tombs" to the entity's tombstones that
// concern the key (all of them when key is nil),
// and alive is the condition that keeps a telemetry row no tombstone covers. A
// tombstone covers the rows of its key and ts range with a smaller ver, so a
// point written again after a delete is back. The condition is monotone in ver
// (if a row survives, newer rows of its (entity, key, ts) survive too), so it
// gives the same answer whether ClickHouse applies it before or after FINAL.
// The row's key, ts and ver reach the lambda as arrays, not as captured columns:
// 18.16 drops columns that only a lambda captures ("Unknown identifier").
const (
	tombstones = `WITH (SELECT groupArray((all_keys, key, start_ts, end_ts, ver)) FROM %s
		WHERE entity_id = toUUID(?) AND (all_keys = 1 OR ? = 1 OR key = ?)) AS tombs `
	alive = ` NOT arrayExists((d, k, t, v) -> (d.1 = 1 OR (d.2 = k AND t >= d.3 AND t < d.4)) AND v < d.5, tombs,
		arrayResize([key], length(tombs), key), arrayResize([ts], length(tombs), ts), arrayResize([ver], length(tombs), ver))`
)

func (s *Store) withTombstones(entity uuid.UUID, key *string) (string, []any) {
	anyKey, k := uint8(1), ""
	if key != nil {
		anyKey, k = 0, *key
	}
	return fmt.Sprintf(tombstones, s.table("telemetry_deletes")), []any{entity.String(), anyKey, k}
}

// Read returns raw points or aggregates as described on storage.ReadQuery; the
// reduction runs in ClickHouse, one row per bucket comes back.
func (s *Store) Read(ctx context.Context, q storage.ReadQuery) ([]kv.Entry, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if q.EndTs <= q.StartTs {
		return nil, nil
	}
	if q.Agg == storage.AggNone || q.Interval <= 0 {
		return s.readRaw(ctx, q)
	}
	return s.readAgg(ctx, q)
}

func (s *Store) readRaw(ctx context.Context, q storage.ReadQuery) ([]kv.Entry, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	order := "DESC"
	if q.Asc {
		order = "ASC"
	}
	with, args := s.withTombstones(q.EntityID, &q.Key)
	query := with + `SELECT ts, type, bool_v, long_v, dbl_v, str_v, json_v
		FROM ` + s.table("telemetry") + ` FINAL
		WHERE entity_id = toUUID(?) AND key = ? AND ts >= ? AND ts < ? AND` + alive + `
		ORDER BY ts ` + order + ` LIMIT ?`
	args = append(args, q.EntityID.String(), q.Key, q.StartTs, q.EndTs, limit)
	rows, err := s.conn.Query(ctx, query, args...)
	if err != nil {
		return nil, fail("read history", err)
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
		if err := rows.Scan(&e.Ts, &typ, &b, &l, &d, &str, &jsonV); err != nil {
			return nil, fail("read history", err)
		}
		e.Key = q.Key
		e.Value = value(typ, b, l, d, str, jsonV)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fail("read history", err)
	}
	return out, nil
}

// aggregates gives, per storage.Agg, the SELECT expressions for whether the
// result is a Double, its Long and its Double value, and the HAVING condition
// that drops buckets without anything to aggregate. nl and nd count the Longs
// and Doubles of the bucket; Longs stay Int64 so that their sums are exact,
// unless the sum lies outside Int64 (where sum wraps): then it is the Double sum,
// as in the embedded store (longsOverflow).
var aggregates = map[storage.Agg]struct{ isDouble, long, double, having string }{
	storage.AggCount: {"0", "toInt64(count())", "toFloat64(0)", "1"},
	storage.AggMin: {"nd > 0", "minIf(long_v, type = 2)",
		"if(nl = 0, minIf(dbl_v, type = 3), least(minIf(dbl_v, type = 3), toFloat64(minIf(long_v, type = 2))))", "nl + nd > 0"},
	storage.AggMax: {"nd > 0", "maxIf(long_v, type = 2)",
		"if(nl = 0, maxIf(dbl_v, type = 3), greatest(maxIf(dbl_v, type = 3), toFloat64(maxIf(long_v, type = 2))))", "nl + nd > 0"},
	storage.AggSum: {"nd > 0 OR abs(sumIf(toFloat64(long_v), type = 2)) >= 9223372036854775808.", "sumIf(long_v, type = 2)",
		"sumIf(dbl_v, type = 3) + sumIf(toFloat64(long_v), type = 2)", "nl + nd > 0"},
	storage.AggAvg: {"1", "toInt64(0)",
		"(sumIf(dbl_v, type = 3) + sumIf(toFloat64(long_v), type = 2)) / (nl + nd)", "nl + nd > 0"},
}

func (s *Store) readAgg(ctx context.Context, q storage.ReadQuery) ([]kv.Entry, error) {
	a, ok := aggregates[q.Agg]
	if !ok {
		return nil, fmt.Errorf("clickhouse: unknown aggregation %d", q.Agg)
	}
	order := "DESC"
	if q.Asc {
		order = "ASC"
	}
	with, args := s.withTombstones(q.EntityID, &q.Key)
	// Buckets start at StartTs + n*Interval; the last one is clipped to EndTs and
	// each point sits in the middle of its (clipped) bucket. The offsets are
	// unsigned, as in the embedded store: Int64 arithmetic wraps, so ts - StartTs
	// and EndTs - bucket read as UInt64 are exact even when a range spans more
	// than half of int64, where the signed values overflow.
	query := with + `SELECT
			toInt64(?) + toInt64(intDiv(toUInt64(ts - toInt64(?)), toUInt64(?)) * toUInt64(?)) AS bucket,
			bucket + toInt64(intDiv(least(toUInt64(toInt64(?) - bucket), toUInt64(?)), 2)) AS mid,
			countIf(type = 2) AS nl,
			countIf(type = 3) AS nd,
			toUInt8(` + a.isDouble + `) AS is_double,
			` + a.long + ` AS long_r,
			` + a.double + ` AS double_r
		FROM ` + s.table("telemetry") + ` FINAL
		WHERE entity_id = toUUID(?) AND key = ? AND ts >= ? AND ts < ? AND` + alive + `
		GROUP BY bucket
		HAVING ` + a.having + `
		ORDER BY bucket ` + order
	args = append(args, q.StartTs, q.StartTs, q.Interval, q.Interval, q.EndTs, q.Interval,
		q.EntityID.String(), q.Key, q.StartTs, q.EndTs)
	rows, err := s.conn.Query(ctx, query, args...)
	if err != nil {
		return nil, fail("aggregate history", err)
	}
	defer rows.Close()
	var out []kv.Entry
	for rows.Next() {
		var (
			bucket, mid, l int64
			nl, nd         uint64
			isDouble       uint8
			d              float64
		)
		if err := rows.Scan(&bucket, &mid, &nl, &nd, &isDouble, &l, &d); err != nil {
			return nil, fail("aggregate history", err)
		}
		e := kv.Entry{Ts: mid, Key: q.Key, Value: kv.LongValue(l)}
		if isDouble != 0 {
			e.Value = kv.DoubleValue(d)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fail("aggregate history", err)
	}
	return out, nil
}
