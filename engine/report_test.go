package engine

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

func kyiv(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Kyiv")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func ms(t *testing.T, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixMilli()
}

// TestRelativeRange: presets are whole calendar units in the zone, across DST.
func TestRelativeRange(t *testing.T) {
	now := time.Date(2024, 3, 31, 12, 0, 0, 0, kyiv(t)) // a Sunday, the day DST starts
	for _, c := range []struct{ preset, from, to string }{
		{"TODAY", "2024-03-30T22:00:00Z", "2024-03-31T21:00:00Z"}, // 23 hours
		{"YESTERDAY", "2024-03-29T22:00:00Z", "2024-03-30T22:00:00Z"},
		{"LAST_7_DAYS", "2024-03-24T22:00:00Z", "2024-03-31T21:00:00Z"},
		{"THIS_WEEK", "2024-03-24T22:00:00Z", "2024-03-31T21:00:00Z"},
		{"PREV_WEEK", "2024-03-17T22:00:00Z", "2024-03-24T22:00:00Z"},
		{"THIS_MONTH", "2024-02-29T22:00:00Z", "2024-03-31T21:00:00Z"},
		{"PREV_MONTH", "2024-01-31T22:00:00Z", "2024-02-29T22:00:00Z"},
		{"LAST_3_MONTHS", "2023-12-31T22:00:00Z", "2024-03-31T21:00:00Z"},
		{"THIS_YEAR", "2023-12-31T22:00:00Z", "2024-12-31T22:00:00Z"},
		{"PREV_YEAR", "2022-12-31T22:00:00Z", "2023-12-31T22:00:00Z"},
		{"LAST_YEAR", "2023-04-01T09:00:00Z", "2024-03-31T09:00:00Z"}, // the last 365 days
	} {
		from, to := relativeRange(c.preset, now)
		if from != ms(t, c.from) || to != ms(t, c.to) {
			t.Errorf("%s: [%s, %s), want [%s, %s)", c.preset, time.UnixMilli(from).UTC().Format(time.RFC3339),
				time.UnixMilli(to).UTC().Format(time.RFC3339), c.from, c.to)
		}
	}
}

// TestDateAxisDST: RAW hours skip the hour that does not exist in spring and
// merge the one that happens twice in autumn; labels are first instants.
func TestDateAxisDST(t *testing.T) {
	loc := kyiv(t)
	raw := []ViewField{{Label: "Date", Source: SourceDate, Grouping: "RAW", GroupBy: "HOUR"}}
	labels := func(fields []ViewField, from, to string) []any {
		t.Helper()
		start, end := ms(t, from), ms(t, to)
		a := newDateAxis(fields, loc, start, end)
		keys, err := a.keys(start, end)
		if err != nil {
			t.Fatal(err)
		}
		var out []any
		for _, k := range keys {
			out = append(out, a.label(k))
		}
		return out
	}
	epoch := func(ss ...string) []any {
		var out []any
		for _, s := range ss {
			out = append(out, strconv.FormatInt(ms(t, s), 10))
		}
		return out
	}
	// Spring: local 00:00–06:00 EET/EEST; 03:00 does not exist.
	got := labels(raw, "2024-03-30T22:00:00Z", "2024-03-31T03:00:00Z")
	want := epoch("2024-03-30T22:00:00Z", "2024-03-30T23:00:00Z", "2024-03-31T00:00:00Z", "2024-03-31T01:00:00Z", "2024-03-31T02:00:00Z")
	if !slices.Equal(got, want) {
		t.Fatalf("spring hours %v, want %v", got, want)
	}
	// Autumn: local 00:00–05:00; 03:00 happens twice, one bucket from its first instant.
	got = labels(raw, "2024-10-26T21:00:00Z", "2024-10-27T03:00:00Z")
	want = epoch("2024-10-26T21:00:00Z", "2024-10-26T22:00:00Z", "2024-10-26T23:00:00Z", "2024-10-27T00:00:00Z", "2024-10-27T02:00:00Z")
	if !slices.Equal(got, want) {
		t.Fatalf("autumn hours %v, want %v", got, want)
	}
	// A month bucket that began before the range, under another offset.
	got = labels([]ViewField{{Source: SourceDate, Grouping: "RAW", GroupBy: "MONTH"}}, "2024-04-10T00:00:00Z", "2024-04-11T00:00:00Z")
	if want := epoch("2024-03-31T21:00:00Z"); !slices.Equal(got, want) {
		t.Fatalf("April bucket %v, want %v", got, want)
	}
	got = labels([]ViewField{{Source: SourceDate, Grouping: "RAW", GroupBy: "MONTH"}}, "2024-03-10T00:00:00Z", "2024-03-11T00:00:00Z")
	if want := epoch("2024-02-29T22:00:00Z"); !slices.Equal(got, want) {
		t.Fatalf("March bucket %v, want %v", got, want)
	}
	// Too many buckets is a 400.
	start, end := ms(t, "2000-01-01T00:00:00Z"), ms(t, "2024-01-01T00:00:00Z")
	if _, err := newDateAxis(raw, loc, start, end).keys(start, end); err == nil {
		t.Fatal("24 years of hours accepted")
	}
}

// TestGroupNumbers: a long and a double of one number are one group (both print
// as that number), shown as the first device's value; a string is apart from
// the number it reads as. ONE_OF and NOT_ONE_OF compare numbers as numbers.
func TestGroupNumbers(t *testing.T) {
	floor := dimRef{SourceAttribute, "floor", "SERVER_SCOPE"}
	values := []kv.Value{kv.LongValue(2), kv.DoubleValue(2), kv.LongValue(1), kv.StringValue("1"), kv.DoubleValue(2.5),
		kv.DoubleValue(math.Copysign(0, -1)), kv.LongValue(0), kv.LongValue(1<<53 + 1), kv.DoubleValue(1 << 53)}
	devices := make([]*Device, len(values))
	dims := make([]map[dimRef]kv.Value, len(values))
	for i, v := range values {
		devices[i] = &Device{ID: EntityID{ID: uuid.New()}, Name: "d" + strconv.Itoa(i)}
		dims[i] = map[dimRef]kv.Value{floor: v}
	}
	fields := []ViewField{{Label: "Floor", Source: SourceAttribute, Key: "floor", Scope: "SERVER_SCOPE"}}
	groups, q := groupDevices(devices, dims, fields, nil)
	var got []any
	for _, g := range groups {
		got = append(got, g.cells[0])
	}
	// Sorted by number; 2^53+1 and 2^53 tie as float64s and keep their order.
	want := []any{math.Copysign(0, -1), int64(1), int64(2), 2.5, int64(1<<53 + 1), float64(1 << 53), "1"}
	if !slices.Equal(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	// Devices 0 and 1 (2 and 2.0) share a group, as do 5 and 6 (-0.0 and 0).
	group := map[string]uint32{}
	for i, id := range q.Devices {
		for j, d := range devices {
			if d.ID.ID == id {
				group[devices[j].Name] = q.Groups[i]
			}
		}
	}
	if group["d0"] != group["d1"] || group["d5"] != group["d6"] || group["d2"] == group["d3"] || group["d7"] == group["d8"] {
		t.Fatalf("device groups %v", group)
	}

	for _, c := range []struct {
		v     kv.Value
		value string
		want  bool
	}{
		{kv.LongValue(2), "2", true}, {kv.DoubleValue(2), "2", true}, {kv.LongValue(2), "2.0", true}, {kv.DoubleValue(2), "2.0", true},
		{kv.DoubleValue(2.5), "2.5", true}, {kv.DoubleValue(2.5), "2", false}, {kv.LongValue(2), "2.5", false},
		{kv.DoubleValue(1e10), "10000000000", true}, {kv.DoubleValue(1e10), "1.0E10", true},
		{kv.LongValue(1<<53 + 1), "9007199254740993", true}, {kv.LongValue(1<<53 + 1), "9007199254740992", false},
		{kv.DoubleValue(1 << 53), "9007199254740993", false},
		{kv.StringValue("2"), "2", true}, {kv.StringValue("2"), "2.0", false}, {kv.StringValue("2.0"), "2.0", true},
		{kv.LongValue(2), "two", false}, {kv.BoolValue(true), "true", true}, {kv.StringValue("A"), "A", true},
	} {
		in := ViewFilter{Condition: "ONE_OF", Values: []string{"x", c.value}}
		out := ViewFilter{Condition: "NOT_ONE_OF", Values: []string{"x", c.value}}
		if matches(in, c.v, true) != c.want || matches(out, c.v, true) == c.want {
			t.Errorf("%s %s against %q: ONE_OF should be %v", c.v.Type, c.v.Text(), c.value, c.want)
		}
	}
}

// TestZoneShiftsFarFuture: past the zone's table (2037) DST still applies in
// every year, also in and after leap years, where Go's ZoneBounds ends a period
// on Dec 31 at the very instant asked about.
func TestZoneShiftsFarFuture(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	hour := []ViewField{{Source: SourceDate, Grouping: "FULL_HOUR"}}
	for _, c := range []struct {
		loc       *time.Location
		from, at  string
		wantLabel string
	}{
		{kyiv(t), "2024-01-01T00:00:00Z", "2041-07-01T12:00:00Z", "2041-07-01 15"},
		{kyiv(t), "2024-01-01T00:00:00Z", "2044-07-01T12:00:00Z", "2044-07-01 15"},
		{kyiv(t), "2024-01-01T00:00:00Z", "2045-01-15T12:00:00Z", "2045-01-15 14"},
		{kyiv(t), "2041-01-01T00:00:00Z", "2041-07-01T12:00:00Z", "2041-07-01 15"},
		{ny, "2024-01-01T00:00:00Z", "2041-07-01T12:00:00Z", "2041-07-01 08"},
		{ny, "2024-01-01T00:00:00Z", "2044-07-01T12:00:00Z", "2044-07-01 08"},
		{ny, "2024-01-01T00:00:00Z", "2044-12-31T12:00:00Z", "2044-12-31 07"},
		{ny, "2024-01-01T00:00:00Z", "9999-07-01T12:00:00Z", "9999-07-01 08"},
	} {
		start, end := ms(t, c.from), ms(t, c.at)+3600_000
		a := newDateAxis(hour, c.loc, start, end)
		// The engine gives the storage the zone from the range's start on.
		q := storage.ReportQuery{Zone: a.storageZone(start), Bucket: a.bucket}
		key := q.Bucket.Key(storage.WallMs(q.Zone, ms(t, c.at)))
		if got := a.label(key); got != c.wantLabel {
			t.Errorf("%s in %s: %v, want %s", c.at, c.loc, got, c.wantLabel)
		}
	}
	// Every year has its two shifts, up to the last one a report covers.
	loc := kyiv(t)
	z := zoneShifts(loc, ms(t, "2035-01-01T00:00:00Z"), maxReportTs)
	if want := 2 * (9999 - 2035 + 1); len(z) != want+1 {
		t.Fatalf("%d zone shifts from 2035 to 9999, want %d", len(z)-1, want)
	}
	for i, s := range z[1:] {
		if _, off := time.UnixMilli(s.From).In(loc).Zone(); int64(off)*1000 != s.OffsetMs || offsetAt(time.UnixMilli(s.From-1).In(loc)) == off {
			t.Fatalf("shift %d at %s is not a change to %d", i, time.UnixMilli(s.From).UTC(), s.OffsetMs)
		}
	}
}

// TestReportRangeBounds: Long.MIN and Long.MAX bounds (clients' "unbounded")
// are cut to the years reports cover, so that no wall time overflows: folds
// still find their buckets, timelines get the bucket limit's 400, not an
// empty or cut-off table.
func TestReportRangeBounds(t *testing.T) {
	e := &Engine{now: time.Now}
	loc := kyiv(t)
	abs := ViewRange{Type: "ABSOLUTE", StartTs: 1, EndTs: 2}
	start, end, err := e.reportRange(abs, loc, math.MinInt64, math.MaxInt64)
	if err != nil || start != minReportTs || end != maxReportTs {
		t.Fatalf("unbounded range: [%d, %d) %v", start, end, err)
	}
	if _, _, err := e.reportRange(abs, loc, maxReportTs+1, math.MaxInt64); err == nil {
		t.Fatal("a range past the year 9999 accepted")
	}
	for _, c := range []struct {
		from, to int64
		field    ViewField
		want     int // keys; -1: too many buckets
	}{
		{1, math.MaxInt64, ViewField{Source: SourceDate, Grouping: "DAY"}, 7},
		{math.MinInt64, math.MaxInt64, ViewField{Source: SourceDate, Grouping: "DAY"}, 7},
		{math.MinInt64, 1, ViewField{Source: SourceDate, Grouping: "MONTH"}, 12},
		{1, math.MaxInt64, ViewField{Source: SourceDate, Grouping: "WEEK_OF_YEAR"}, 53},
		{1, math.MaxInt64, ViewField{Source: SourceDate, Grouping: "HOUR"}, 24},
		{1, math.MaxInt64, ViewField{Source: SourceDate, Grouping: "RAW", GroupBy: "MONTH"}, -1},
		{math.MinInt64, 1, ViewField{Source: SourceDate, Grouping: "FULL_DATE"}, -1},
		{1, math.MaxInt64, ViewField{Source: SourceDate, Grouping: "RAW", GroupBy: "YEAR", GroupByAmount: 10}, 804}, // 1970 … 9990, and 10000 on Kyiv's clock
	} {
		start, end, err := e.reportRange(abs, loc, c.from, c.to)
		if err != nil {
			t.Fatal(err)
		}
		a := newDateAxis([]ViewField{c.field}, loc, start, end)
		keys, err := a.keys(start, end)
		if c.want < 0 {
			if err == nil {
				t.Errorf("%+v over [%d, %d): %d buckets, want the bucket limit's error", c.field, c.from, c.to, len(keys))
			}
			continue
		}
		if err != nil || len(keys) != c.want {
			t.Errorf("%+v over [%d, %d): %d buckets (%v), want %d", c.field, c.from, c.to, len(keys), err, c.want)
		}
	}
}

// TestRoundSum: sums of doubles are rounded to 15 significant digits, so that
// sums a few units in the last place apart (another order of addition, on
// another back end) are one cell; whole numbers below 2^53 stay exact.
func TestRoundSum(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{
		{21.900000000000002, 21.9}, {21.9, 21.9}, {0.1 + 0.2, 0.3}, {-0.30000000000000004, -0.3},
		{3.422654173312068, 3.42265417331207}, {1e-300 / 3, 3.33333333333333e-301},
		{1234567890123456, 1234567890123456}, {-(1<<53 - 1), -(1<<53 - 1)}, {0, 0},
		{math.Inf(1), math.Inf(1)},
	} {
		if got := roundSum(c.in); got != c.want {
			t.Errorf("roundSum(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if !math.IsNaN(roundSum(math.NaN())) {
		t.Error("NaN not kept")
	}
	// Sums two units in the last place either side of 21.9 are one cell, for
	// SUM, AVG and DELTA.
	low := math.Nextafter(math.Nextafter(21.9, 0), 0)
	high := math.Nextafter(math.Nextafter(21.9, 100), 100)
	for _, agg := range []string{"SUM", "AVG", "DELTA"} {
		cell := func(sum float64) any {
			return aggCell(agg, &storage.ReportRow{Count: 3, NumCount: 3, Sum: sum, Delta: sum})
		}
		if a, b, c := cell(low), cell(21.9), cell(high); a != b || b != c {
			t.Errorf("%s: %v, %v, %v", agg, a, b, c)
		}
	}
	if got := aggCell("AVG", &storage.ReportRow{Count: 3, NumCount: 3, Sum: 0.3}); got != 0.1 {
		t.Errorf("AVG of 0.3 over 3: %v", got)
	}
}

// TestReportOneGroup: a view without dimension fields has one group, the whole
// set, so its report has its row (a card's dataTable[0]) whether devices match
// with no data, no device matches, or there are none; with dimensions no device
// means no row.
func TestReportOneGroup(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	for _, name := range []string{"meter", "unused"} {
		if _, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := te.SaveDevice(ctx, admin, &Device{Name: "m1", Type: "meter"}, ""); err != nil {
		t.Fatal(err)
	}
	day := ViewRange{Type: "ABSOLUTE", StartTs: ms(t, "2024-01-01T00:00:00Z"), EndTs: ms(t, "2024-01-03T00:00:00Z")}
	aggs := []ViewField{{Label: "c", Source: SourceTelemetry, Key: "e", Aggregation: "COUNT"},
		{Label: "s", Source: SourceTelemetry, Key: "e", Aggregation: "SUM"}}
	byName := ViewFilter{Name: "name", Field: FilterField{Source: SourceEntityName}}
	report := func(profile string, fields []ViewField, filters map[string][]string) string {
		t.Helper()
		v, err := te.SaveView(ctx, admin, &View{Name: "v", Source: ViewSource{DeviceProfile: profile}, Fields: fields,
			Filters: []ViewFilter{byName}, Range: day})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := te.BuildReport(ctx, admin, ReportRequest{ViewConfigID: v.ID.ID.String(), Filters: filters})
		if err != nil {
			t.Fatal(err)
		}
		b, err := rep.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	const card = `{"columnLabels":["c","s"],"dataTable":[{"c":0,"s":null}]}`
	for _, c := range []struct {
		what, profile string
		fields        []ViewField
		filters       map[string][]string
		want          string
	}{
		{"a device without data", "meter", aggs, nil, card},
		{"no device passes the filters", "meter", aggs, map[string][]string{"name": {"none"}}, card},
		{"a profile without devices", "unused", aggs, nil, card},
		{"by day, no device", "unused", append([]ViewField{{Label: "d", Source: SourceDate, Grouping: "FULL_DATE"}}, aggs...), nil,
			`{"columnLabels":["d","c","s"],"dataTable":[{"d":"2024-01-01","c":0,"s":null},{"d":"2024-01-02","c":0,"s":null}]}`},
		{"with a dimension, no device", "unused", append([]ViewField{{Label: "n", Source: SourceEntityName}}, aggs...), nil,
			`{"columnLabels":["n","c","s"],"dataTable":[]}`},
	} {
		if got := report(c.profile, c.fields, c.filters); got != c.want {
			t.Errorf("%s: %s, want %s", c.what, got, c.want)
		}
	}
}

// TestReportOwnerTitleUnread: a report whose owner column cannot read the
// tenant's title (the store failing, the report cancelled) fails; it does not
// answer the devices without a customer with a blank owner.
func TestReportOwnerTitleUnread(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	if _, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "meter"}); err != nil {
		t.Fatal(err)
	}
	if _, err := te.SaveDevice(ctx, admin, &Device{Name: "m1", Type: "meter"}, ""); err != nil {
		t.Fatal(err)
	}
	day := ViewRange{Type: "ABSOLUTE", StartTs: ms(t, "2024-01-01T00:00:00Z"), EndTs: ms(t, "2024-01-02T00:00:00Z")}
	v, err := te.SaveView(ctx, admin, &View{Name: "owners", Source: ViewSource{DeviceProfile: "meter"}, Range: day, Fields: []ViewField{
		{Label: "o", Source: SourceOwner}, {Label: "c", Source: SourceTelemetry, Key: "e", Aggregation: "COUNT"}}})
	if err != nil {
		t.Fatal(err)
	}
	te.store = &failTenantAfterCustomers{Backend: te.store}
	if rep, err := te.BuildReport(ctx, admin, ReportRequest{ViewConfigID: v.ID.ID.String()}); err == nil {
		b, _ := rep.MarshalJSON()
		t.Fatalf("a report whose tenant title could not be read: %s, want an error", b)
	}
}

// failTenantAfterCustomers fails the reads of tenants that follow a list of
// customers (the report's owner column reads them in that order).
type failTenantAfterCustomers struct {
	storage.Backend
	armed atomic.Bool
}

func (s *failTenantAfterCustomers) List(ctx context.Context, kind string, owner uuid.UUID) ([]storage.Record, error) {
	if kind == kindCustomer {
		s.armed.Store(true)
	}
	return s.Backend.List(ctx, kind, owner)
}

func (s *failTenantAfterCustomers) Report(ctx context.Context, q storage.ReportQuery) ([]storage.ReportRow, error) {
	return s.Backend.(storage.Reporter).Report(ctx, q)
}

func (s *failTenantAfterCustomers) Get(ctx context.Context, kind string, id uuid.UUID) (storage.Record, error) {
	if kind == kindTenant && s.armed.Load() {
		return storage.Record{}, errors.New("injected failure")
	}
	return s.Backend.Get(ctx, kind, id)
}
