package clickhouse

import (
	"context"
	"fmt"
	"math"
	"strconv"

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
	tombstones = `WITH (SELECT arraySort(groupArray((all_keys, key, start_ts, end_ts, ver))) FROM %s
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
	if !q.Aggregated() {
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
	bucket := `toInt64(?) + toInt64(intDiv(toUInt64(ts - toInt64(?)), toUInt64(?)) * toUInt64(?)) AS bucket,
			bucket + toInt64(intDiv(least(toUInt64(toInt64(?) - bucket), toUInt64(?)), 2)) AS mid`
	bucketArgs := []any{q.StartTs, q.StartTs, q.Interval, q.Interval, q.EndTs, q.Interval}
	if len(q.Edges) > 1 {
		b, err := edgeBucketSQL(q.Edges)
		if err != nil {
			return nil, err
		}
		bucket, bucketArgs = b+` AS bucket, toInt64(0) AS mid`, nil
	}
	query := with + `SELECT
			` + bucket + `,
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
	args = append(append(args, bucketArgs...), q.EntityID.String(), q.Key, q.StartTs, q.EndTs)
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
		if len(q.Edges) > 1 {
			if bucket < 0 || bucket >= int64(len(q.Edges)-1) {
				return nil, fmt.Errorf("clickhouse: aggregate history: bucket %d of %d edges", bucket, len(q.Edges))
			}
			mid = storage.EdgeMid(q.Edges, int(bucket))
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

// maxEdgeCells bounds the lookup arrays of edgeBucketSQL, per bucket.
const maxEdgeCells = 4

// edgeBucketSQL is the index of the bucket of edges that holds ts, in
// constant time per row: 18.16 has no binary search over an array, and a
// comparison with every edge (multiIf, arrayFirstIndex) costs each row as
// many steps as there are buckets. The range is cut into cells as wide as the
// narrowest bucket that is not the first or the last one (those two may be
// clipped to any width), so a cell holds at most one of the inner edges.
// Two transform lookups give the bucket at the cell's start and the edge
// inside the cell, if any; a row at or past that edge is in the next bucket.
func edgeBucketSQL(edges []int64) (string, error) {
	first, last := edges[0], edges[len(edges)-1]
	width := uint64(last - first) // unsigned: the range may exceed int64
	for i := 1; i+2 < len(edges); i++ {
		width = min(width, uint64(edges[i+1]-edges[i]))
	}
	width = max(width, 1)
	cells := (uint64(last-first)-1)/width + 1
	if cells > uint64(maxEdgeCells*len(edges)) {
		return "", fmt.Errorf("clickhouse: aggregate history: %d buckets too uneven for %d cells", len(edges)-1, cells)
	}
	var ids, starts, inCells, inEdges []int64
	bucket := 0
	for c := range int64(cells) {
		start := first + int64(uint64(c)*width)
		for bucket+2 < len(edges) && edges[bucket+1] <= start {
			bucket++
		}
		ids, starts = append(ids, c), append(starts, int64(bucket))
		if e := edges[bucket+1]; bucket+2 < len(edges) && e-start < int64(width) {
			inCells, inEdges = append(inCells, c), append(inEdges, e)
		}
	}
	cell := "intDiv(toUInt64(ts - " + i64(first) + "), toUInt64(" + strconv.FormatUint(width, 10) + "))"
	sql := "toInt64(transform(" + cell + ", " + arraySQL("UInt64", ids) + ", " + arraySQL("Int64", starts) + ", toInt64(0)))"
	if len(inCells) > 0 {
		sql = "(" + sql + " + (ts >= transform(" + cell + ", " + arraySQL("UInt64", inCells) + ", " +
			arraySQL("Int64", inEdges) + ", " + i64(math.MaxInt64) + ")))"
	}
	return sql, nil
}

// arraySQL is an array literal of type Array(typ). Every element is cast:
// ClickHouse types a bare literal by its value (a millisecond timestamp past
// 2^32 is UInt64), and 18.16 finds no common type for Int64 and UInt64.
func arraySQL(typ string, vals []int64) string {
	b := append(make([]byte, 0, (len(typ)+24)*len(vals)+2), '[')
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "to"+typ+"("...)
		b = strconv.AppendInt(b, v, 10)
		b = append(b, ')')
	}
	return string(append(b, ']'))
}
