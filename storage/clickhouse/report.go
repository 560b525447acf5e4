package clickhouse

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

var _ storage.Reporter = (*Store)(nil)

// Report implements storage.Reporter with one query: the devices and their group
// numbers go in as the external table report_devices; the inner GROUP BY reduces
// each device's points per key and bucket (DELTA and LATEST are per device), the
// outer one merges the devices of a group. Only one row per (group, key, bucket)
// comes back. Bucketing is storage.Bucket.Key on the wall time, written in SQL.
func (s *Store) Report(ctx context.Context, q storage.ReportQuery) ([]storage.ReportRow, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(q.Devices) != len(q.Groups) {
		return nil, fmt.Errorf("clickhouse: report of %d devices with %d groups", len(q.Devices), len(q.Groups))
	}
	if q.StartTs >= q.EndTs || len(q.Devices) == 0 || len(q.Keys) == 0 {
		return nil, nil
	}
	// The rows of a narrowed report: only those in the years that had points.
	years := ""
	if len(q.Zone) > maxZoneShifts {
		var found bool
		var err error
		if q, years, found, err = s.narrowReport(ctx, q); err != nil || !found {
			return nil, err
		}
	}
	// Which rows need FINAL is read before the report's query: the marked days
	// and the partitions that are one merged part. A delivery marks a day before
	// it inserts rows that may repeat a point, but its mark and rows can both land
	// between that read and the query, whose FINAL then misses them and counts a
	// point twice. So both are read again after the query: unchanged, nothing
	// landed in between that the query read wrongly. Changed, the report runs
	// again, and the last attempt reads every row with FINAL, which is right
	// whatever lands meanwhile.
	for attempt := 1; ; attempt++ {
		out, stable, err := s.reportOnce(ctx, q, years, attempt == reportAttempts)
		if err != nil || stable || attempt == reportAttempts {
			return out, err
		}
		reportRetries.Inc()
	}
}

// reportAttempts bounds the runs of a report whose FINAL reads raced a delivery.
const reportAttempts = 3

// maxZoneShifts is the most zone shifts a report's query carries: each is a
// multiIf branch (wallSQL), in every branch of the query, tested on every row.
const maxZoneShifts = 128

// narrowReport narrows q to the years its points are in, and its zone to the
// shifts over those years. A range of thousands of years (a client's Long.MAX
// for "no end") in a zone with DST has thousands of shifts, past ClickHouse's
// query size, while the points are usually in a few years. The years are
// returned as a condition on the rows too: a point written meanwhile into
// another year, where the narrowed zone is wrong, is left out, as if written
// after the report. found is false when the range holds no points at all.
func (s *Store) narrowReport(ctx context.Context, q storage.ReportQuery) (_ storage.ReportQuery, years string, found bool, err error) {
	t, err := ext.NewTable("report_devices", ext.Column("entity_id", "UUID"))
	if err != nil {
		return q, "", false, err
	}
	for _, d := range q.Devices {
		if err := t.Append(d); err != nil {
			return q, "", false, err
		}
	}
	keys := make([]string, len(q.Keys))
	for i, k := range q.Keys {
		keys[i] = quote(k)
	}
	// Deleted and repeated rows count too: a year too many only keeps shifts.
	year := floorDivSQL("ts", narrowYearMs)
	rows, err := s.conn.Query(ch.Context(ctx, ch.WithExternalTable(t)), `SELECT DISTINCT `+year+` AS y FROM `+s.table("telemetry")+`
		WHERE entity_id IN (SELECT entity_id FROM report_devices) AND key IN (`+strings.Join(keys, ", ")+`) AND ts >= ? AND ts < ?
		ORDER BY y`, q.StartTs, q.EndTs)
	if err != nil {
		return q, "", false, fail("find the years of a report", err)
	}
	defer rows.Close()
	var ys []int64
	for rows.Next() {
		var y int64
		if err := rows.Scan(&y); err != nil {
			return q, "", false, fail("find the years of a report", err)
		}
		ys = append(ys, y)
	}
	if err := rows.Err(); err != nil {
		return q, "", false, fail("find the years of a report", err)
	}
	if len(ys) == 0 {
		return q, "", false, nil
	}
	// A year's bounds, kept within int64 (the first and last years are cut).
	yearStart := func(y int64) int64 {
		if y <= math.MinInt64/narrowYearMs {
			return math.MinInt64
		}
		return y * narrowYearMs
	}
	yearEnd := func(y int64) int64 {
		if y >= math.MaxInt64/narrowYearMs {
			return math.MaxInt64
		}
		return (y + 1) * narrowYearMs
	}
	q.StartTs = max(q.StartTs, yearStart(ys[0]))
	q.EndTs = min(q.EndTs, yearEnd(ys[len(ys)-1]))
	// For each year, the shift in force at its start and those in it.
	inForce := func(ts int64) int {
		return max(sort.Search(len(q.Zone), func(i int) bool { return q.Zone[i].From > ts })-1, 0)
	}
	var zone []storage.ZoneShift
	lits := make([]string, len(ys))
	for i, y := range ys {
		lits[i] = i64(y)
		from, to := max(yearStart(y), q.StartTs), min(yearEnd(y), q.EndTs)
		for j := inForce(from); j < len(q.Zone) && q.Zone[j].From < to; j++ {
			if len(zone) == 0 || q.Zone[j].From > zone[len(zone)-1].From {
				zone = append(zone, q.Zone[j])
			}
		}
	}
	q.Zone = zone
	if ys[len(ys)-1]-ys[0] == int64(len(ys)-1) {
		return q, "", true, nil // consecutive years: the narrowed range says it all
	}
	return q, " AND " + year + " IN (" + strings.Join(lits, ", ") + ")", true, nil
}

// narrowYearMs is the "year" of narrowReport, 366 days: any span would do.
const narrowYearMs = 366 * msPerDay

// reportOnce runs a report and tells whether what decided its FINAL reads was
// the same after it (stable). everyFinal reads every row with FINAL; years
// (narrowReport) further limits the rows read.
func (s *Store) reportOnce(ctx context.Context, q storage.ReportQuery, years string, everyFinal bool) (out []storage.ReportRow, stable bool, err error) {
	keys := make([]string, len(q.Keys))
	for i, k := range q.Keys {
		keys[i] = quote(k)
	}
	keyList := strings.Join(keys, ", ")
	inDevices := `entity_id IN (SELECT entity_id FROM report_devices)`

	// What may hold two copies of a point, the only rows read with FINAL: the
	// marked days (telemetry_repeats), and every row of a device with a
	// tombstone for these keys (a point deleted and written again).
	var whole, marked map[uuid.UUID]bool
	var marks []entityDay
	devices := func() (*ext.Table, error) {
		t, err := ext.NewTable("report_devices", ext.Column("entity_id", "UUID"), ext.Column("grp", "UInt32"),
			ext.Column("whole", "UInt8"), ext.Column("marked", "UInt8"))
		if err != nil {
			return nil, err
		}
		for i, d := range q.Devices {
			if err := t.Append(d, q.Groups[i], flag(whole[d]), flag(marked[d])); err != nil {
				return nil, err
			}
		}
		return t, nil
	}
	tables := func() (context.Context, error) {
		d, err := devices()
		if err != nil {
			return nil, err
		}
		if len(marks) == 0 {
			return ch.Context(ctx, ch.WithExternalTable(d)), nil
		}
		r, err := ext.NewTable("report_repeats", ext.Column("entity_id", "UUID"), ext.Column("day", "Int64"))
		if err != nil {
			return nil, err
		}
		for _, m := range marks {
			if err := r.Append(m.entity, m.day); err != nil {
				return nil, err
			}
		}
		return ch.Context(ctx, ch.WithExternalTable(d, r)), nil
	}
	qctx, err := tables()
	if err != nil {
		return nil, false, err
	}
	tombstoned := `SELECT DISTINCT entity_id FROM ` + s.table("telemetry_deletes") +
		` WHERE ` + inDevices + ` AND (all_keys = 1 OR key IN (` + keyList + `))`
	if whole, err = s.entities(qctx, tombstoned, "look up tombstones for a report"); err != nil {
		return nil, false, err
	}
	if everyFinal {
		for _, d := range q.Devices {
			whole[d] = true // every row of the device may hold copies
		}
	}
	if qctx, err = tables(); err != nil { // a fresh copy of the table for each query
		return nil, false, err
	}
	if marks, err = s.repeats(qctx, q.StartTs, q.EndTs, inDevices); err != nil {
		return nil, false, err
	}
	marked = make(map[uuid.UUID]bool, len(whole)+len(marks))
	for d := range whole {
		marked[d] = true
	}
	for _, m := range marks {
		marked[m.entity] = true
	}

	// Tombstones are rare: the per-row check only runs when the report's devices
	// have one (read.go's, with the device added; a UUID cannot be a literal on
	// 18.16, so the scalar subquery carries ids as text).
	with, alive := "", ""
	if len(whole) > 0 {
		with = `WITH (SELECT arraySort(groupArray((toString(entity_id), all_keys, key, start_ts, end_ts, ver))) FROM ` + s.table("telemetry_deletes") +
			` WHERE ` + inDevices + ` AND (all_keys = 1 OR key IN (` + keyList + `))) AS tombs `
		alive = ` AND NOT arrayExists((d, e, k, t, v) -> d.1 = e AND (d.2 = 1 OR (d.3 = k AND t >= d.4 AND t < d.5)) AND v < d.6, tombs,
			arrayResize([toString(entity_id)], length(tombs), toString(entity_id)), arrayResize([key], length(tombs), key),
			arrayResize([ts], length(tombs), ts), arrayResize([ver], length(tombs), ver))`
	}

	// The rows that may hold copies, as a condition on (entity, ts): copies of a
	// point share both, so they always fall on the same side of it.
	var copies []string
	if len(whole) > 0 {
		copies = append(copies, `entity_id IN (SELECT entity_id FROM report_devices WHERE whole = 1)`)
	}
	if len(marks) > 0 {
		copies = append(copies, `(entity_id, intDiv(ts, `+strconv.Itoa(msPerDay)+`)) IN (SELECT entity_id, day FROM report_repeats)`)
	}
	mayCopy := "(" + strings.Join(copies, " OR ") + ")"

	// A partition that is one merged part holds no copies either.
	var clean [][2]int64
	var parts string
	if !everyFinal {
		if clean, parts, err = s.mergedRanges(ctx, q.StartTs, q.EndTs); err != nil {
			return nil, false, err
		}
	}
	inClean := "0"
	if len(clean) > 0 {
		var rs []string
		for _, r := range clean {
			rs = append(rs, fmt.Sprintf("(ts >= %d AND ts < %d)", r[0], r[1]))
		}
		inClean = "(" + strings.Join(rs, " OR ") + ")"
	}

	// The points: the rows that cannot hold copies are read without FINAL, the
	// others with it. They select only the columns the aggregations read: FINAL
	// reads every column it returns.
	cols := "entity_id, key, ts, type, long_v, dbl_v"
	if q.Aggs&(storage.ReportUniq|storage.ReportLatest) != 0 {
		cols += ", bool_v, str_v, json_v"
	}
	// materialize: on a Distributed table 18.16 refuses a UNION ALL (the two
	// kinds of branches below) whose branches return a constant column, as the
	// bucket of a report without a date field is.
	var args []any
	branch := func(final, devices, cond string) string {
		args = append(args, q.StartTs, q.EndTs)
		return with + `SELECT ` + cols + `,
					materialize(` + bucketSQL(q.Bucket, wallSQL(q.Zone), minWall(q), maxWall(q)) + `) AS bucket
				FROM ` + s.table("telemetry") + final + `
				WHERE ` + devices + ` AND key IN (` + keyList + `) AND ts >= ? AND ts < ?` + years + alive + cond
	}
	// A FINAL read is one stream on 18.16: merging the parts, and everything
	// after it up to the GROUP BY, runs on one core. Copies of a point share its
	// device, so the devices that may hold copies are split into one branch per
	// thread the server grants a query, each a contiguous run of them in the
	// table's own order (ORDER BY … LIMIT on the external table: the primary
	// index then reads disjoint ranges; UUID order differs between Go and
	// ClickHouse), and UNION ALL runs the branches in parallel.
	final := func(cond string) string {
		n := min(s.finalBranches(ctx), len(marked))
		var bs []string
		for i := range n {
			from, to := i*len(marked)/n, (i+1)*len(marked)/n
			bs = append(bs, branch(" FINAL", fmt.Sprintf(
				`entity_id IN (SELECT entity_id FROM report_devices WHERE marked = 1 ORDER BY entity_id LIMIT %d, %d)`, from, to-from), cond))
		}
		return strings.Join(bs, unionAll)
	}
	var points string
	switch {
	case len(marked) == 0:
		points = branch("", inDevices, "")
	case len(clean) == 1 && clean[0] == [2]int64{q.StartTs, q.EndTs}:
		points = branch("", inDevices, "")
	default:
		points = branch("", inDevices, " AND ("+inClean+" OR NOT "+mayCopy+")") +
			unionAll + final(" AND NOT "+inClean+" AND "+mayCopy)
	}
	p := partials(q.Aggs)
	// report_devices has one row per device, so ALL joins each group to its
	// device once. Not ANY: on 18.16 it means the same, but since 20.x (with
	// any_join_distinct_right_table_keys off, the default) an ANY INNER JOIN
	// takes each right row once, which would keep one group per device.
	//
	// The groups are keyed by the key's place in the report's list (ki), not the
	// key itself: hashing a number instead of a string is a quarter of the time
	// of a report over 10 million points.
	//
	// Sums of doubles are compensated (sumKahan; its state, not its result, goes
	// from device to group): plain sums depend on the order of the terms, which
	// varies with the parts and threads, and would differ in the last digits from
	// the embedded back end's (storage/embedded's fsum); the engine rounds what
	// is left. sumKahan adds each point as classic Kahan, which is within a unit
	// or two in the last place when the points have one sign; points of both
	// signs that cancel leave an error relative to the sum of their magnitudes.
	// A state per point (arrayReduce) would merge them exactly, at about half
	// again the aggregation's time.
	query := `SELECT grp, ki, bucket, sum(cnt), sum(ncnt), sumKahanMerge(s), minIf(mn, ncnt > 0), maxIf(mx, ncnt > 0), ` + p.outer + `
		FROM (
			SELECT entity_id, ki, bucket, count() AS cnt, countIf(isnum) AS ncnt, sumKahanStateIf(num, isnum) AS s,
				minIf(num, isnum) AS mn, maxIf(num, isnum) AS mx` + p.inner + `
			FROM (
				-- Computed past the UNION: 18.16 refuses a column constant in one branch only.
				SELECT ` + cols + `, bucket, indexOf([` + keyList + `], key) AS ki,
					type IN (2, 3) AS isnum, if(type = 2, toFloat64(long_v), dbl_v) AS num FROM (
				` + points + `
				)
			)
			GROUP BY entity_id, ki, bucket
		) ALL INNER JOIN report_devices USING entity_id
		GROUP BY grp, ki, bucket`
	if qctx, err = tables(); err != nil {
		return nil, false, err
	}
	if s.beforeReportQuery != nil {
		s.beforeReportQuery()
	}
	rows, err := s.conn.Query(qctx, query, args...)
	if err != nil {
		return nil, false, fail("build a report", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			r               storage.ReportRow
			ki, count, ncnt uint64
			uniq            uint64
			typ, b          uint8
			l               int64
			d               float64
			str, jsonV      string
		)
		if err := rows.Scan(&r.Group, &ki, &r.Bucket, &count, &ncnt, &r.Sum, &r.Min, &r.Max,
			&uniq, &typ, &b, &l, &d, &str, &jsonV, &r.LatestTs, &r.Delta); err != nil {
			return nil, false, fail("build a report", err)
		}
		if ki < 1 || ki > uint64(len(q.Keys)) {
			return nil, false, fmt.Errorf("clickhouse: report row of key number %d of %d", ki, len(q.Keys))
		}
		r.Key = q.Keys[ki-1]
		r.Count, r.NumCount, r.Uniq = int64(count), int64(ncnt), int64(uniq)
		if q.Aggs&storage.ReportLatest != 0 {
			r.Latest = value(typ, b, l, d, str, jsonV)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fail("build a report", err)
	}
	rows.Close()
	if everyFinal {
		return out, true, nil
	}
	if qctx, err = tables(); err != nil {
		return nil, false, err
	}
	marksAfter, err := s.repeats(qctx, q.StartTs, q.EndTs, inDevices)
	if err != nil {
		return nil, false, err
	}
	_, partsAfter, err := s.mergedRanges(ctx, q.StartTs, q.EndTs)
	if err != nil {
		return nil, false, err
	}
	return out, partsAfter == parts && sameDays(marks, marksAfter), nil
}

// entities runs a query that returns entity ids, as a set.
func (s *Store) entities(ctx context.Context, query, what string) (map[uuid.UUID]bool, error) {
	rows, err := s.conn.Query(ctx, query)
	if err != nil {
		return nil, fail(what, err)
	}
	defer rows.Close()
	out := map[uuid.UUID]bool{}
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			return nil, fail(what, err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fail(what, err)
	}
	return out, nil
}

// repeats returns the marked days of the report's devices (inDevices) that
// overlap [start, end).
func (s *Store) repeats(ctx context.Context, start, end int64, inDevices string) ([]entityDay, error) {
	rows, err := s.conn.Query(ctx, `SELECT entity_id, day FROM `+s.table("telemetry_repeats")+`
		WHERE `+inDevices+` AND day >= ? AND day <= ? GROUP BY entity_id, day`, start/msPerDay-1, (end-1)/msPerDay+1)
	if err != nil {
		return nil, fail("look up the days that may hold copies", err)
	}
	defer rows.Close()
	var out []entityDay
	for rows.Next() {
		var d entityDay
		if err := rows.Scan(&d.entity, &d.day); err != nil {
			return nil, fail("look up the days that may hold copies", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fail("look up the days that may hold copies", err)
	}
	return out, nil
}

func flag(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// unionAll joins the branches of a report's point source.
const unionAll = "\n\t\t\t\tUNION ALL\n\t\t\t\t"

// finalBranches is the number of branches a FINAL read is split into: the
// server's max_threads for this connection's user (read once; 1 if it cannot be
// read), at most 16.
func (s *Store) finalBranches(ctx context.Context) int {
	if n := s.threads.Load(); n > 0 {
		return int(n)
	}
	var v string
	if err := s.conn.QueryRow(ctx, `SELECT value FROM system.settings WHERE name = 'max_threads'`).Scan(&v); err != nil {
		return 1 // try again next report
	}
	// "8" on 18.16, "'auto(8)'" on current releases.
	n, _ := strconv.Atoi(strings.Trim(v, "'autoAUTO()"))
	n = min(max(n, 1), 16)
	s.threads.Store(int32(n))
	return n
}

// mergedRanges returns the parts of [start, end) whose telemetry partition (a
// month of ts in the server's time zone) is one part made by a merge:
// ReplacingMergeTree keeps one row per (entity, key, ts) there. A part straight
// from an insert is not merged: it may hold two copies of a point. Adjacent
// ranges are joined. parts names those merged parts, so that Report can tell
// whether a part arrived in them between this look and its query.
func (s *Store) mergedRanges(ctx context.Context, start, end int64) (out [][2]int64, parts string, err error) {
	rows, err := s.conn.Query(ctx, `SELECT partition, timezone(), any(name) FROM system.parts
		WHERE database = ? AND table = 'telemetry' AND active
		GROUP BY partition HAVING count() = 1 AND min(level) > 0 ORDER BY partition`, strings.Trim(s.db, "`"))
	if err != nil {
		return nil, "", fail("list merged partitions", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var part, tz, name string
		if err := rows.Scan(&part, &tz, &name); err != nil {
			return nil, "", fail("list merged partitions", err)
		}
		ym, err := strconv.Atoi(part) // toYYYYMM
		loc, lerr := time.LoadLocation(tz)
		if err != nil || lerr != nil {
			continue // not a month; read it with FINAL
		}
		from := time.Date(ym/100, time.Month(ym%100), 1, 0, 0, 0, 0, loc)
		r := [2]int64{max(from.UnixMilli(), start), min(from.AddDate(0, 1, 0).UnixMilli(), end)}
		if r[0] >= r[1] {
			continue // outside the report: its merges do not matter
		}
		names = append(names, name)
		if n := len(out); n > 0 && out[n-1][1] == r[0] {
			out[n-1][1] = r[1]
		} else {
			out = append(out, r)
		}
	}
	return out, strings.Join(names, ","), rows.Err()
}

// sameDays reports whether a and b hold the same marked days, in any order.
func sameDays(a, b []entityDay) bool {
	if len(a) != len(b) {
		return false
	}
	in := make(map[entityDay]bool, len(a))
	for _, d := range a {
		in[d] = true
	}
	for _, d := range b {
		if !in[d] {
			return false
		}
	}
	return true
}

// partials gives the inner (per device) and outer (per group) SELECT parts for
// UNIQ, LATEST and DELTA, or constants when the report does not need them, so
// the columns stay the same. LATEST ties on ts go to the greater device id, as
// its text (UUID comparison in ClickHouse is not byte order).
func partials(aggs storage.ReportAggs) (p struct{ inner, outer string }) {
	var outer []string
	if aggs&storage.ReportUniq != 0 {
		p.inner += `, uniqExactState(type, bool_v, long_v, dbl_v, str_v, json_v) AS u`
		outer = append(outer, `toUInt64(uniqExactMerge(u))`)
	} else {
		outer = append(outer, `toUInt64(0)`)
	}
	if aggs&storage.ReportLatest != 0 {
		p.inner += `, max(ts) AS lts, argMax(type, ts) AS ltype, argMax(bool_v, ts) AS lbool, argMax(long_v, ts) AS llong,
			argMax(dbl_v, ts) AS ldbl, argMax(str_v, ts) AS lstr, argMax(json_v, ts) AS ljson`
		for _, c := range []string{"ltype", "lbool", "llong", "ldbl", "lstr", "ljson"} {
			outer = append(outer, `argMax(`+c+`, (lts, toString(entity_id)))`)
		}
		outer = append(outer, `max(lts)`)
	} else {
		outer = append(outer, `toUInt8(0)`, `toUInt8(0)`, `toInt64(0)`, `toFloat64(0)`, `''`, `''`, `toInt64(0)`)
	}
	if aggs&storage.ReportDelta != 0 {
		p.inner += `, argMaxIf(num, ts, isnum) - argMinIf(num, ts, isnum) AS delta`
		// Each device's delta as a sumKahan state: states merge with an exact
		// two-sum, where sumKahan's own adding (classic Kahan) loses the
		// compensation when a term outweighs the running sum, as deltas of
		// opposite signs do. One state per device and bucket: cheap.
		outer = append(outer, `sumKahanMerge(arrayReduce('sumKahanState', [delta]))`)
	} else {
		outer = append(outer, `toFloat64(0)`)
	}
	p.outer = strings.Join(outer, ", ")
	return p
}

func i64(n int64) string { return "toInt64(" + strconv.FormatInt(n, 10) + ")" }

// wallSQL is storage.WallMs of ts: ts plus the offset of the shift in force.
func wallSQL(zone []storage.ZoneShift) string {
	if len(zone) == 0 {
		return "ts"
	}
	if len(zone) == 1 {
		return "(ts + " + i64(zone[0].OffsetMs) + ")"
	}
	var b strings.Builder
	b.WriteString("(ts + multiIf(")
	for i := 1; i < len(zone); i++ {
		fmt.Fprintf(&b, "ts < %s, %s, ", i64(zone[i].From), i64(zone[i-1].OffsetMs))
	}
	b.WriteString(i64(zone[len(zone)-1].OffsetMs) + "))")
	return b.String()
}

// floorSQL is x rounded down to a multiple of step. intDiv truncates toward 0, so
// an x that may be negative needs a correction; it costs about a tenth of a
// report's time, so it is left out when x is known to be non-negative.
func floorSQL(x string, step int64, nonNeg bool) string {
	if nonNeg {
		return fmt.Sprintf("(intDiv(%[1]s, %[2]s) * %[2]s)", x, i64(step))
	}
	return "(" + floorDivSQL(x, step) + " * " + i64(step) + ")"
}

// minWall is the earliest wall time a report's points can have: its start plus
// the smallest offset of its zone.
func minWall(q storage.ReportQuery) int64 {
	off := int64(0) // before the first shift (storage.WallMs)
	for _, z := range q.Zone {
		off = min(off, z.OffsetMs)
	}
	return q.StartTs + off
}

// maxWall is the latest wall time a report's points can have: its end plus the
// largest offset of its zone.
func maxWall(q storage.ReportQuery) int64 {
	off := int64(0)
	for _, z := range q.Zone {
		off = max(off, z.OffsetMs)
	}
	return q.EndTs + off
}

// dateTimeMs is the range of wall times ClickHouse's DateTime (UInt32 seconds)
// holds, where its calendar functions can be used.
const dateTimeMs = int64(1) << 32 * 1000

// bucketSQL is storage.Bucket.Key of the wall time w, which lies in [least,
// most].
func bucketSQL(b storage.Bucket, w string, least, most int64) string {
	const (
		minute = int64(60_000)
		hour   = 60 * minute
		day    = 24 * hour
		week   = 7 * day
		monday = 4 * day
	)
	n := max(b.Amount, 1)
	pos := least >= 0
	dayNum := "intDiv(" + floorSQL(w, day, pos) + ", " + i64(day) + ")"
	isoWeekday := func(dayNum string) string { return "(modulo(modulo(" + dayNum + ", 7) + 7 + 3, 7) + 1)" }
	// The calendar: ClickHouse's own functions where its DateTime reaches,
	// integer arithmetic (civilSQL) before 1970 and after 2106.
	var year, month, dom, isoWeek string
	if pos && most < dateTimeMs {
		date := "toDateTime(intDiv(" + w + ", 1000), 'UTC')"
		year, month, dom = "toInt64(toYear("+date+"))", "toInt64(toMonth("+date+"))", "toInt64(toDayOfMonth("+date+"))"
		isoWeek = "toInt64(toISOWeek(" + date + "))"
	} else {
		civil := civilSQL(dayNum, "cal_")
		year, month, dom = "tupleElement("+civil+", 1)", "tupleElement("+civil+", 2)", "tupleElement("+civil+", 3)"
		// An ISO week is the one of its Thursday, numbered in the Thursday's
		// year.
		isoWeek = let("cal_thu", dayNum+" - "+isoWeekday(dayNum)+" + "+i64(4),
			"intDiv(cal_thu - "+yearStartSQL("tupleElement("+civilSQL("cal_thu", "cal_thu_")+", 1)", "cal_jan1_")+", "+i64(7)+") + "+i64(1))
	}
	months := "(" + year + " * 12 + " + month + " - 1)"
	switch b.Unit {
	case storage.BucketMinute, storage.BucketHour:
		unit := minute
		if b.Unit == storage.BucketHour {
			unit = hour
		}
		return "(" + floorSQL(w, day, pos) + " + " + floorSQL(w+" - "+floorSQL(w, day, pos), n*unit, true) + ")"
	case storage.BucketDay:
		return floorSQL(w, n*day, pos)
	case storage.BucketWeek:
		return "(" + floorSQL(w+" - "+i64(monday), n*week, least >= monday) + " + " + i64(monday) + ")"
	case storage.BucketMonth:
		return floorSQL(months, n, pos)
	case storage.BucketQuarter:
		return floorSQL(months, 3*n, pos)
	case storage.BucketYear:
		return floorSQL(months, 12*n, pos)
	case storage.BucketMinuteOfHour:
		return "toInt64(intDiv(" + w + " - " + floorSQL(w, hour, pos) + ", " + i64(minute) + "))"
	case storage.BucketHourOfDay:
		return "toInt64(intDiv(" + w + " - " + floorSQL(w, day, pos) + ", " + i64(hour) + "))"
	case storage.BucketDayOfWeek:
		return "toInt64(" + isoWeekday(dayNum) + ")"
	case storage.BucketDayOfMonth:
		return dom
	case storage.BucketWeekOfYear:
		return isoWeek
	case storage.BucketWeekOfMonth:
		return "toInt64(intDiv(" + dom + " - 1 + " + isoWeekday(dayNum+" - "+dom+" + 1") + " - 1, 7) + 1)"
	case storage.BucketMonthOfYear:
		return month
	case storage.BucketQuarterOfYear:
		return "toInt64(intDiv(" + month + " - 1, 3) + 1)"
	}
	return "toInt64(0)"
}

// floorDivSQL is x divided by n, rounded down (intDiv truncates toward 0).
func floorDivSQL(x string, n int64) string {
	return fmt.Sprintf("(intDiv(%[1]s, %[2]s) - (modulo(%[1]s, %[2]s) < 0))", x, i64(n))
}

// civilSQL is the proleptic Gregorian (year, month 1-12, day of month) of the
// day counted from 1970-01-01 that the expression day gives, a tuple, in Int64
// arithmetic valid for every day an Int64 of milliseconds reaches (H.
// Hinnant's civil_from_days: 400-year eras of 146,097 days, years starting in
// March so that a leap day is the last of its year). Names bound with let
// start with prefix.
func civilSQL(day, prefix string) string {
	z, era, doe, yoe, doy, mp := prefix+"z", prefix+"era", prefix+"doe", prefix+"yoe", prefix+"doy", prefix+"mp"
	return let(z, day+" + "+i64(719468),
		let(era, floorDivSQL(z, 146097),
			let(doe, z+" - "+era+" * "+i64(146097), // [0, 146096]
				let(yoe, "intDiv("+doe+" - intDiv("+doe+", "+i64(1460)+") + intDiv("+doe+", "+i64(36524)+") - intDiv("+doe+", "+i64(146096)+"), "+i64(365)+")", // [0, 399]
					let(doy, doe+" - ("+i64(365)+" * "+yoe+" + intDiv("+yoe+", "+i64(4)+") - intDiv("+yoe+", "+i64(100)+"))", // from March 1
						let(mp, "intDiv("+i64(5)+" * "+doy+" + "+i64(2)+", "+i64(153)+")", // March = 0
							"tuple("+yoe+" + "+era+" * "+i64(400)+" + ("+mp+" >= 10), "+
								mp+" + if("+mp+" < 10, "+i64(3)+", "+i64(-9)+"), "+
								doy+" - intDiv("+i64(153)+" * "+mp+" + "+i64(2)+", "+i64(5)+") + "+i64(1)+")"))))))
}

// yearStartSQL is the day, counted from 1970-01-01, of January 1 of year
// (Hinnant's days_from_civil, for a January), with names as civilSQL's.
func yearStartSQL(year, prefix string) string {
	y, era, yoe := prefix+"y", prefix+"era", prefix+"yoe"
	return let(y, year+" - "+i64(1), // January belongs to the previous March year
		let(era, floorDivSQL(y, 400),
			let(yoe, y+" - "+era+" * "+i64(400),
				era+" * "+i64(146097)+" + "+yoe+" * "+i64(365)+" + intDiv("+yoe+", "+i64(4)+") - intDiv("+yoe+", "+i64(100)+") + "+i64(306-719468))))
}

// let is body with name bound to the value of x, computed once: a lambda over
// a one-element array. Written out instead, the calendar's steps, each used
// several times by the next, nest into a text past ClickHouse's query size,
// and aliases cost 18.16 seconds to analyze the same nesting.
func let(name, x, body string) string {
	return "arrayElement(arrayMap(" + name + " -> " + body + ", [" + x + "]), 1)"
}

// quote is s as a ClickHouse string literal. A question mark goes as \x3F:
// the query also has ? placeholders, and clickhouse-go's binding, which reads
// the whole text, turns \? into ? even inside a literal.
func quote(s string) string {
	return "'" + quoter.Replace(s) + "'"
}

var quoter = strings.NewReplacer(`\`, `\\`, `'`, `\'`, `?`, `\x3F`)
