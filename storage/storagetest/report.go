package storagetest

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// RunReport is the conformance suite of storage.Reporter: every back end that
// builds reports must give the same rows for the same history, bucket and zone,
// across DST changes. open is as for Run; the back end must implement
// storage.Reporter. Empty buckets have no rows here: the engine lays them out.
func RunReport(t *testing.T, open func(t *testing.T) storage.Backend) {
	t.Run("HandChecked", func(t *testing.T) { testReportHand(t, open) })
	t.Run("EveryBucket", func(t *testing.T) { testReportBuckets(t, open) })
	t.Run("Deletes", func(t *testing.T) { testReportDeletes(t, open) })
	t.Run("KeyNames", func(t *testing.T) { testReportKeyNames(t, open) })
	t.Run("FarDates", func(t *testing.T) { testReportFarDates(t, open) })
	t.Run("LongZone", func(t *testing.T) { testReportLongZone(t, open) })
	t.Run("Fractions", func(t *testing.T) { testReportFractions(t, open) })
}

// testReportFractions: sums of decimal fractions, which doubles do not hold
// exactly (0.1, 23.4, 1.1), over many points and several devices per group.
// Float addition depends on the order of the terms, and every back end adds in
// its own; a plain sum drifts tens of units in the last place from the exact
// one here, and two back ends apart (21.9 on one, 21.900000000000002 on the
// other). Compensated sums stay within a unit or so, which the engine's
// rounding to 15 digits makes one number (checkRows, nearSum).
func testReportFractions(t *testing.T, open func(t *testing.T) storage.Backend) {
	b := open(t)
	values := []float64{0.1, 23.4, 1.1, 0.7, 1.1, 0.1}
	var pts []repPoint
	for i, d := range repDev {
		for k := range 700 {
			ts := repStart + int64(k)*30_000 + int64(i)*1000 // 350 minutes from local midnight
			pts = append(pts, repPoint{d, kv.Entry{Ts: ts, Key: "e", Value: kv.DoubleValue(values[(k+i)%len(values)])}},
				// A meter counting up in decimal steps: DELTA sums fractions over devices.
				repPoint{d, kv.Entry{Ts: ts, Key: "m", Value: kv.DoubleValue(float64(k)*0.3 + 0.1*float64(i+1))}})
		}
	}
	writeReportFixture(t, b, pts)
	for _, groups := range [][]uint32{{0, 0, 1}, {0, 0, 0}} {
		for _, bk := range []storage.Bucket{{Unit: storage.BucketNone}, {Unit: storage.BucketHour}, {Unit: storage.BucketMinuteOfHour}} {
			q := repQuery(bk)
			q.Keys, q.Groups = []string{"e", "m"}, groups
			checkRows(t, fmt.Sprintf("groups %v, bucket %+v", groups, bk), report(t, b, q), expectRows(q, pts))
		}
	}
}

// testReportLongZone: a range of ten thousand years in a zone with DST, as the
// engine sends for a client's Long.MIN to Long.MAX, has some 20,000 shifts;
// points in a few scattered years still take the offset in force at them.
func testReportLongZone(t *testing.T, open func(t *testing.T) storage.Backend) {
	b := open(t)
	var zone []storage.ZoneShift
	for y := 1; y <= 9999; y++ {
		zone = append(zone, storage.ZoneShift{From: time.Date(y, 3, 31, 1, 0, 0, 0, time.UTC).UnixMilli(), OffsetMs: 3 * 3600_000},
			storage.ZoneShift{From: time.Date(y, 10, 27, 1, 0, 0, 0, time.UTC).UnixMilli(), OffsetMs: 2 * 3600_000})
	}
	zone[0].From = math.MinInt64
	pts := repPoints()
	for i, s := range []string{"1600-03-31T00:30:00Z", "1600-03-31T01:30:00Z", "2041-07-01T12:00:00Z", "2044-12-31T23:30:00Z",
		"2045-01-01T00:30:00Z", "2400-10-27T00:30:00Z", "9999-10-27T01:30:00Z", "9999-12-31T21:59:00Z", "9999-12-31T22:00:00Z"} {
		pts = append(pts, repPoint{repDev[i%3], kv.Entry{Ts: at(s), Key: "e", Value: kv.LongValue(int64(i))}})
	}
	writeReportFixture(t, b, pts)
	for _, bk := range []storage.Bucket{{Unit: storage.BucketHour}, {Unit: storage.BucketDay}, {Unit: storage.BucketYear},
		{Unit: storage.BucketHourOfDay}, {Unit: storage.BucketMonthOfYear}} {
		q := repQuery(bk)
		q.Zone, q.StartTs, q.EndTs = zone, math.MinInt64/2, at("9999-12-31T22:00:00Z")
		checkRows(t, fmt.Sprintf("bucket %+v", bk), report(t, b, q), expectRows(q, pts))
		// A range that starts at the points of 1600: the shift in force there
		// is the one before the range.
		q.StartTs = at("1600-03-31T00:00:00Z")
		checkRows(t, fmt.Sprintf("bucket %+v from 1600", bk), report(t, b, q), expectRows(q, pts))
	}
}

// testReportFarDates: calendar buckets of points before 1970 and after 2106,
// where ClickHouse's DateTime (UInt32 seconds) does not reach, across leap
// years, century years and ISO weeks that straddle a new year.
func testReportFarDates(t *testing.T, open func(t *testing.T) storage.Backend) {
	b := open(t)
	var pts []repPoint
	ranges := [][2]int64{
		{at("1599-12-20T00:00:00Z"), at("1601-01-10T00:00:00Z")},
		{at("1899-12-01T00:00:00Z"), at("1901-03-05T00:00:00Z")},
		{at("1967-12-25T00:00:00Z"), at("1970-01-20T00:00:00Z")},
		{at("2105-12-20T00:00:00Z"), at("2106-03-01T00:00:00Z")},
		{at("2399-12-25T00:00:00Z"), at("2401-01-08T00:00:00Z")},
	}
	for _, r := range ranges {
		for ts := r[0] + 17; ts < r[1]; ts += 19*3600_000 + 7*60_000 {
			pts = append(pts, repPoint{repDev[len(pts)%3], kv.Entry{Ts: ts, Key: "e", Value: kv.LongValue(ts / 60_000 % 1000)}})
		}
	}
	writeReportFixture(t, b, pts)
	zone := []storage.ZoneShift{{From: math.MinInt64, OffsetMs: -5 * 3600_000}}
	for _, bk := range []storage.Bucket{
		{Unit: storage.BucketDay}, {Unit: storage.BucketWeek}, {Unit: storage.BucketMonth}, {Unit: storage.BucketQuarter},
		{Unit: storage.BucketYear}, {Unit: storage.BucketDayOfWeek}, {Unit: storage.BucketDayOfMonth}, {Unit: storage.BucketWeekOfYear},
		{Unit: storage.BucketWeekOfMonth}, {Unit: storage.BucketMonthOfYear}, {Unit: storage.BucketQuarterOfYear},
	} {
		q := repQuery(bk) // one report over all of them: by day, about 2,000 rows
		q.Keys, q.StartTs, q.EndTs, q.Zone = []string{"e"}, ranges[0][0], ranges[len(ranges)-1][1], nil
		checkRows(t, fmt.Sprintf("bucket %+v", bk), report(t, b, q), expectRows(q, pts))
		q.Zone = zone
		checkRows(t, fmt.Sprintf("bucket %+v, UTC-5", bk), report(t, b, q), expectRows(q, pts))
	}
}

// testReportKeyNames: keys with quotes, backslashes, question marks (the
// ClickHouse store's SQL has ? placeholders) and non-ASCII letters report as
// any other key; UNIQ counts 0.0 and -0.0 as two values.
func testReportKeyNames(t *testing.T, open func(t *testing.T) storage.Backend) {
	b := open(t)
	keys := []string{`a\?`, `b?`, `c'd`, `$1`, `e\`, `Grüße`, `f\'?`}
	var pts []repPoint
	for i, k := range keys {
		pts = append(pts, repPoint{repDev[i%3], kv.Entry{Ts: repStart + int64(i)*60_000, Key: k, Value: kv.LongValue(int64(i + 1))}})
	}
	// And UNIQ tells 0.0 from -0.0, as ClickHouse's uniqExact does.
	pts = append(pts, repPoint{repDev[0], kv.Entry{Ts: repStart + 1000, Key: keys[0], Value: kv.DoubleValue(0)}},
		repPoint{repDev[1], kv.Entry{Ts: repStart + 2000, Key: keys[0], Value: kv.DoubleValue(math.Copysign(0, -1))}})
	writeReportFixture(t, b, pts)
	q := repQuery(storage.Bucket{Unit: storage.BucketDay})
	q.Keys = keys
	checkRows(t, "odd key names", report(t, b, q), expectRows(q, pts))
}

// The report fixture: Europe/Kyiv around the end of DST on 2024-10-27, when
// 04:00 EEST (01:00Z) became 03:00 EET.
var (
	repDev   = []uuid.UUID{uuid.MustParse("00000000-0000-4000-8000-000000000001"), uuid.MustParse("00000000-0000-4000-8000-000000000002"), uuid.MustParse("00000000-0000-4000-8000-000000000003")}
	repOther = uuid.MustParse("00000000-0000-4000-8000-000000000004") // not in the report
	repZone  = []storage.ZoneShift{{From: at("2024-09-01T00:00:00Z"), OffsetMs: 3 * 3600_000}, {From: at("2024-10-27T01:00:00Z"), OffsetMs: 2 * 3600_000}}
	repStart = at("2024-10-26T21:00:00Z") // local midnight
	repEnd   = at("2024-10-27T03:00:00Z")
	allAggs  = storage.ReportAvg | storage.ReportSum | storage.ReportMin | storage.ReportMax | storage.ReportCount |
		storage.ReportUniq | storage.ReportLatest | storage.ReportDelta
)

func at(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

type repPoint struct {
	dev uuid.UUID
	kv.Entry
}

func repPoints() []repPoint {
	d1, d2, d3 := repDev[0], repDev[1], repDev[2]
	p := func(dev uuid.UUID, ts string, key string, v kv.Value) repPoint {
		return repPoint{dev, kv.Entry{Ts: at(ts), Key: key, Value: v}}
	}
	return []repPoint{
		p(d1, "2024-10-26T20:30:00Z", "e", kv.LongValue(1)), // before the range
		p(d1, "2024-10-26T21:00:00Z", "e", kv.LongValue(2)), // its first instant
		p(d1, "2024-10-27T00:30:00Z", "e", kv.LongValue(10)),
		p(d1, "2024-10-27T01:00:00Z", "e", kv.LongValue(7)),
		p(d1, "2024-10-27T01:30:00Z", "e", kv.LongValue(20)),
		p(d1, "2024-10-27T02:30:00Z", "e", kv.DoubleValue(30.5)),
		p(d1, "2024-10-27T03:00:00Z", "e", kv.LongValue(999)), // the range's end: out
		p(d2, "2024-10-27T00:45:00Z", "e", kv.LongValue(4)),
		p(d2, "2024-10-27T02:30:00Z", "e", kv.BoolValue(true)),
		p(d3, "2024-10-27T01:15:00Z", "e", kv.LongValue(100)),
		p(d3, "2024-10-27T02:15:00Z", "e", kv.JSONValue(`{"a":1}`)),
		p(d1, "2024-10-27T00:30:00Z", "s", kv.StringValue("on")),
		p(d1, "2024-10-27T01:30:00Z", "s", kv.StringValue("off")),
		p(d2, "2024-10-27T00:30:00Z", "s", kv.StringValue("x")),
		p(d2, "2024-10-27T01:30:00Z", "s", kv.StringValue("tie")),
		p(d1, "2024-10-27T00:30:00Z", "ignored", kv.LongValue(5)),
		p(repOther, "2024-10-27T00:30:00Z", "e", kv.LongValue(1000)),
	}
}

func writeReportFixture(t *testing.T, b storage.Backend, pts []repPoint) {
	t.Helper()
	rows := make([]storage.Row, len(pts))
	for i, p := range pts {
		rows[i] = storage.Row{TenantID: tenant, EntityID: p.dev, Entry: p.Entry}
	}
	must(t, b.Write(t.Context(), rows))
}

func repQuery(bucket storage.Bucket) storage.ReportQuery {
	return storage.ReportQuery{
		Devices: repDev, Groups: []uint32{0, 0, 1}, Keys: []string{"e", "s"},
		StartTs: repStart, EndTs: repEnd, Zone: repZone, Bucket: bucket, Aggs: allAggs,
	}
}

func report(t *testing.T, b storage.Backend, q storage.ReportQuery) []storage.ReportRow {
	t.Helper()
	rep, ok := b.(storage.Reporter)
	if !ok {
		t.Fatalf("%T is no storage.Reporter", b)
	}
	rows, err := rep.Report(t.Context(), q)
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	sortRows(rows)
	return rows
}

func sortRows(rows []storage.ReportRow) {
	slices.SortFunc(rows, func(a, b storage.ReportRow) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Bucket, b.Bucket))
	})
}

func formatRows(rows []storage.ReportRow) string {
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "\n  g%d %s bucket=%d count=%d num=%d sum=%v min=%v max=%v uniq=%d latest=%s@%d delta=%v",
			r.Group, r.Key, r.Bucket, r.Count, r.NumCount, r.Sum, r.Min, r.Max, r.Uniq, formatValue(r.Latest), r.LatestTs, r.Delta)
	}
	return b.String()
}

func formatValue(v kv.Value) string { return v.Type.String() + ":" + v.Text() }

func checkRows(t *testing.T, what string, got, want []storage.ReportRow) {
	t.Helper()
	sortRows(want)
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		g, w := got[i], want[i]
		same = g.Group == w.Group && g.Key == w.Key && g.Bucket == w.Bucket && g.Count == w.Count &&
			g.NumCount == w.NumCount && nearSum(g.Sum, w.Sum) && g.Min == w.Min && g.Max == w.Max && g.Uniq == w.Uniq &&
			g.Latest.Same(w.Latest) && g.LatestTs == w.LatestTs && nearSum(g.Delta, w.Delta)
	}
	if !same {
		t.Fatalf("%s:\ngot%s\nwant%s", what, formatRows(got), formatRows(want))
	}
}

// nearSum reports whether got is the exact sum want (rounded to a double) to
// within two units in the last place. The terms of a sum come in an order of
// the back end's (ClickHouse's varies with its parts and threads), so the bits
// of a sum of doubles such as 0.1 cannot be demanded; compensated summation
// keeps it this near the exact sum however many terms there are, which is what
// the engine's rounding to 15 digits needs to give every back end one number.
// Sums of integers and binary fractions are exact: want itself.
func nearSum(got, want float64) bool {
	if got == want {
		return true
	}
	ulp := math.Nextafter(math.Abs(want), math.Inf(1)) - math.Abs(want)
	return math.Abs(got-want) <= 2*ulp
}

// exactPrec is the precision of the reference's sums: enough bits that any
// sum of a few thousand doubles is exact.
const exactPrec = 2200

// testReportHand checks hour buckets across the DST end against hand-computed
// rows: the wall hour 03:00 happens twice and is one bucket; LATEST ties go to
// the greater device id; DELTA is per device, then summed.
func testReportHand(t *testing.T, open func(t *testing.T) storage.Backend) {
	b := open(t)
	writeReportFixture(t, b, repPoints())
	wall := func(s string) int64 { return at(s) } // a wall time written as if UTC
	got := report(t, b, repQuery(storage.Bucket{Unit: storage.BucketHour}))
	checkRows(t, "hour buckets", got, []storage.ReportRow{
		{Group: 0, Key: "e", Bucket: wall("2024-10-27T00:00:00Z"), Count: 1, NumCount: 1, Sum: 2, Min: 2, Max: 2, Uniq: 1,
			Latest: kv.LongValue(2), LatestTs: at("2024-10-26T21:00:00Z")},
		{Group: 0, Key: "e", Bucket: wall("2024-10-27T03:00:00Z"), Count: 4, NumCount: 4, Sum: 41, Min: 4, Max: 20, Uniq: 4,
			Latest: kv.LongValue(20), LatestTs: at("2024-10-27T01:30:00Z"), Delta: 10},
		{Group: 0, Key: "e", Bucket: wall("2024-10-27T04:00:00Z"), Count: 2, NumCount: 1, Sum: 30.5, Min: 30.5, Max: 30.5, Uniq: 2,
			Latest: kv.BoolValue(true), LatestTs: at("2024-10-27T02:30:00Z")},
		{Group: 0, Key: "s", Bucket: wall("2024-10-27T03:00:00Z"), Count: 4, Uniq: 4,
			Latest: kv.StringValue("tie"), LatestTs: at("2024-10-27T01:30:00Z")},
		{Group: 1, Key: "e", Bucket: wall("2024-10-27T03:00:00Z"), Count: 1, NumCount: 1, Sum: 100, Min: 100, Max: 100, Uniq: 1,
			Latest: kv.LongValue(100), LatestTs: at("2024-10-27T01:15:00Z")},
		{Group: 1, Key: "e", Bucket: wall("2024-10-27T04:00:00Z"), Count: 1, Uniq: 1,
			Latest: kv.JSONValue(`{"a":1}`), LatestTs: at("2024-10-27T02:15:00Z")},
	})
	// Minute of the hour folds the range; d1's minute-30 points are not
	// consecutive (01:00 lies between), and its DELTA is still last minus first.
	got = report(t, b, repQuery(storage.Bucket{Unit: storage.BucketMinuteOfHour}))
	for _, r := range got {
		if r.Group == 0 && r.Key == "e" && r.Bucket == 30 && r.Delta != 20.5 {
			t.Fatalf("DELTA of a recurring bucket: %v, want 20.5%s", r.Delta, formatRows(got))
		}
	}
	// No devices, no keys, an absent key, an empty range: no rows.
	q := repQuery(storage.Bucket{})
	q.Devices, q.Groups = nil, nil
	checkRows(t, "no devices", report(t, b, q), nil)
	q = repQuery(storage.Bucket{})
	q.Keys = nil
	checkRows(t, "no keys", report(t, b, q), nil)
	q = repQuery(storage.Bucket{})
	q.Keys = []string{"absent"}
	checkRows(t, "absent key", report(t, b, q), nil)
	q = repQuery(storage.Bucket{})
	q.StartTs, q.EndTs = at("2020-01-01T00:00:00Z"), at("2020-02-01T00:00:00Z")
	checkRows(t, "empty range", report(t, b, q), nil)
}

// expectRows reduces points as storage.ReportRow describes, with the reference
// bucketing storage.Bucket.Key: the expectation every back end must meet.
func expectRows(q storage.ReportQuery, pts []repPoint) []storage.ReportRow {
	group := map[uuid.UUID]uint32{}
	for i, d := range q.Devices {
		group[d] = q.Groups[i]
	}
	type rk struct {
		g uint32
		k string
		b int64
	}
	type dk struct {
		rk
		dev uuid.UUID
	}
	rows := map[rk]*storage.ReportRow{}
	uniq := map[rk]map[string]bool{} // by type and text: 0.0 and -0.0 are two values, as in ClickHouse
	first, last := map[dk]repPoint{}, map[dk]repPoint{}
	latestDev := map[rk]uuid.UUID{}
	// Sums are exact, then rounded once: the order of their terms is the back
	// end's (nearSum).
	sums, deltas := map[rk]*big.Float{}, map[rk]*big.Float{}
	add := func(m map[rk]*big.Float, k rk, x float64) {
		if m[k] == nil {
			m[k] = new(big.Float).SetPrec(exactPrec)
		}
		m[k].Add(m[k], big.NewFloat(x))
	}
	sorted := slices.Clone(pts)
	slices.SortStableFunc(sorted, func(a, b repPoint) int { return cmp.Compare(a.Ts, b.Ts) })
	for _, p := range sorted {
		g, ok := group[p.dev]
		if !ok || !slices.Contains(q.Keys, p.Key) || p.Ts < q.StartTs || p.Ts >= q.EndTs {
			continue
		}
		k := rk{g, p.Key, q.Bucket.Key(storage.WallMs(q.Zone, p.Ts))}
		r := rows[k]
		if r == nil {
			r = &storage.ReportRow{Group: g, Key: p.Key, Bucket: k.b}
			rows[k], uniq[k] = r, map[string]bool{}
		}
		r.Count++
		uniq[k][formatValue(p.Value)] = true
		if r.Count == 1 || p.Ts > r.LatestTs || (p.Ts == r.LatestTs && p.dev.String() > latestDev[k].String()) {
			r.Latest, r.LatestTs, latestDev[k] = p.Value, p.Ts, p.dev
		}
		if n, ok := p.Value.Numeric(); ok {
			if r.NumCount == 0 {
				r.Min, r.Max = n, n
			}
			r.Min, r.Max = math.Min(r.Min, n), math.Max(r.Max, n)
			r.NumCount++
			add(sums, k, n)
			d := dk{k, p.dev}
			if _, ok := first[d]; !ok {
				first[d] = p
			}
			last[d] = p
		}
	}
	for d, f := range first {
		a, _ := f.Value.Numeric()
		z, _ := last[d].Value.Numeric()
		add(deltas, d.rk, z-a) // per device as a double, as the back ends have it
	}
	var out []storage.ReportRow
	for k, r := range rows {
		r.Uniq = int64(len(uniq[k]))
		if sums[k] != nil {
			r.Sum, _ = sums[k].Float64()
		}
		if deltas[k] != nil {
			r.Delta, _ = deltas[k].Float64()
		}
		out = append(out, *r)
	}
	return out
}

// testReportBuckets runs every bucket unit (and amounts) over ranges across
// both DST changes of 2024 and compares with the reference.
func testReportBuckets(t *testing.T, open func(t *testing.T) storage.Backend) {
	b := open(t)
	pts := repPoints()
	// Points every 7 h 13 min through 2024 on d1 and d2, every 11 h 3 min on d3.
	for i, d := range repDev {
		step := int64(7*3600_000 + 13*60_000)
		if i == 2 {
			step = 11*3600_000 + 3*60_000
		}
		for ts := at("2024-01-01T00:00:17Z") + int64(i)*60_000; ts < at("2025-01-01T00:00:00Z"); ts += step {
			pts = append(pts, repPoint{d, kv.Entry{Ts: ts, Key: "e", Value: kv.LongValue(ts / 60_000 % 1000)}})
		}
	}
	writeReportFixture(t, b, pts)
	zone := []storage.ZoneShift{{From: at("2023-12-01T00:00:00Z"), OffsetMs: 2 * 3600_000},
		{From: at("2024-03-31T01:00:00Z"), OffsetMs: 3 * 3600_000}, {From: at("2024-10-27T01:00:00Z"), OffsetMs: 2 * 3600_000}}
	for _, bk := range []storage.Bucket{
		{Unit: storage.BucketNone}, {Unit: storage.BucketMinute, Amount: 30}, {Unit: storage.BucketHour}, {Unit: storage.BucketHour, Amount: 5},
		{Unit: storage.BucketDay}, {Unit: storage.BucketDay, Amount: 3}, {Unit: storage.BucketWeek}, {Unit: storage.BucketWeek, Amount: 2},
		{Unit: storage.BucketMonth}, {Unit: storage.BucketMonth, Amount: 2}, {Unit: storage.BucketQuarter}, {Unit: storage.BucketYear},
		{Unit: storage.BucketMinuteOfHour}, {Unit: storage.BucketHourOfDay}, {Unit: storage.BucketDayOfWeek}, {Unit: storage.BucketDayOfMonth},
		{Unit: storage.BucketWeekOfYear}, {Unit: storage.BucketWeekOfMonth}, {Unit: storage.BucketMonthOfYear}, {Unit: storage.BucketQuarterOfYear},
	} {
		q := repQuery(bk)
		q.Zone, q.StartTs, q.EndTs = zone, at("2024-01-01T00:00:00Z"), at("2025-01-01T00:00:00Z")
		checkRows(t, fmt.Sprintf("bucket %+v", bk), report(t, b, q), expectRows(q, pts))
	}
}

// testReportDeletes: deleted history is left out; a point written again after
// the delete is back.
func testReportDeletes(t *testing.T, open func(t *testing.T) storage.Backend) {
	b := open(t)
	pts := repPoints()
	writeReportFixture(t, b, pts)
	must(t, b.DeleteSeries(t.Context(), storage.DeleteQuery{EntityID: repDev[0], Keys: []string{"e"},
		StartTs: at("2024-10-27T00:00:00Z"), EndTs: at("2024-10-27T01:15:00Z")}))
	// Tombstones on every device, so that on a cluster they sit on both shards
	// (the report's tombstone list must read the same in each of its branches).
	for _, d := range repDev[1:] {
		must(t, b.DeleteSeries(t.Context(), storage.DeleteQuery{EntityID: d, Keys: []string{"e"},
			StartTs: at("2024-10-27T00:00:00Z"), EndTs: at("2024-10-27T00:45:00Z")}))
	}
	again := repPoint{repDev[0], kv.Entry{Ts: at("2024-10-27T00:30:00Z"), Key: "e", Value: kv.LongValue(11)}}
	write(t, b, again.dev, again.Entry)
	kept := []repPoint{again}
	for _, p := range pts {
		if p.dev == repDev[0] && p.Key == "e" && p.Ts >= at("2024-10-27T00:00:00Z") && p.Ts < at("2024-10-27T01:15:00Z") {
			continue
		}
		if p.dev != repDev[0] && p.Key == "e" && p.Ts >= at("2024-10-27T00:00:00Z") && p.Ts < at("2024-10-27T00:45:00Z") {
			continue
		}
		kept = append(kept, p)
	}
	q := repQuery(storage.Bucket{Unit: storage.BucketHour})
	checkRows(t, "after a delete", report(t, b, q), expectRows(q, kept))
}
