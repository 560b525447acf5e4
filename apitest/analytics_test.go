package apitest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/config"
)

// The analytics tests run one fixture on each back end and check every report
// against hand-computed tables; TestAnalytics then demands that both back ends
// gave byte-identical bodies for every report.

// utc parses an RFC 3339 instant into epoch ms.
func utc(t *testing.T, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixMilli()
}

type analytics struct {
	n        *testNode
	auth     string // X-Authorization header of the tenant admin
	jwt      string // its bare token
	dev      map[string]string
	tok      map[string]string
	customer string // title of the demo customer, the owner of m3
	tenant   string // title of the demo tenant, the owner of m1 and m2
	points   int    // telemetry points written
}

// Fixture instants, Europe/Kyiv: DST ends 2024-10-27 01:00Z (04:00 EEST →
// 03:00 EET) and starts 2024-03-31 01:00Z (03:00 EET → 04:00 EEST).
const (
	fallDay   = "2024-10-26T21:00:00Z" // local midnight of 2024-10-27
	fallEnd   = "2024-10-27T03:00:00Z" // local 05:00 EET
	springDay = "2024-03-29T22:00:00Z" // local midnight of 2024-03-30 (EET)
	springEnd = "2024-04-01T21:00:00Z" // local midnight of 2024-04-02 (EEST)
)

func newAnalytics(t *testing.T, n *testNode) *analytics {
	t.Helper()
	a := &analytics{n: n, auth: n.tenantAuth(), dev: map[string]string{}, tok: map[string]string{}}
	a.jwt = strings.TrimPrefix(a.auth, "X-Authorization: Bearer ")
	var me struct {
		CustomerID entityID `json:"customerId"`
		TenantID   entityID `json:"tenantId"`
	}
	n.must(200, "GET", "/api/auth/user", "", n.login("customer@thingsboard.org", "customer")).JSON(t, &me)
	var cust, ten struct{ Title string }
	n.must(200, "GET", "/api/customer/"+me.CustomerID.ID, "", a.auth).JSON(t, &cust)
	n.must(200, "GET", "/api/tenant/"+me.TenantID.ID, "", n.login("sysadmin@thingsboard.org", "sysadmin")).JSON(t, &ten)
	a.customer, a.tenant = cust.Title, ten.Title

	for _, d := range []struct{ name, label, typ, attrs string }{
		{"m1", "L1", "meter", `{"building":"A","floor":1}`},
		{"m2", "L2", "meter", `{"building":"A","floor":2}`},
		{"m3", "", "meter", `{"building":"B","floor":3}`},
		{"x1", "", "other", `{"building":"A"}`},
	} {
		var dev struct{ ID entityID }
		n.must(200, "POST", "/api/device", `{"name":"`+d.name+`","type":"`+d.typ+`","label":"`+d.label+`"}`, a.auth).JSON(t, &dev)
		var cred struct{ CredentialsID string }
		n.must(200, "GET", "/api/device/"+dev.ID.ID+"/credentials", "", a.auth).JSON(t, &cred)
		a.dev[d.name], a.tok[d.name] = dev.ID.ID, cred.CredentialsID
		n.must(200, "POST", "/api/plugins/telemetry/DEVICE/"+dev.ID.ID+"/SERVER_SCOPE", d.attrs, a.auth)
	}
	n.must(200, "POST", "/api/customer/"+me.CustomerID.ID+"/device/"+a.dev["m3"], "", a.auth)

	type pt struct {
		at     string
		values string
	}
	for dev, pts := range map[string][]pt{
		"m1": {
			{"2024-10-27T00:30:00Z", `{"energy":10,"temp":20.5,"state":"on"}`},  // 03:30 EEST
			{"2024-10-27T01:30:00Z", `{"energy":20,"temp":21.5,"state":"off"}`}, // 03:30 EET
			{"2024-10-27T02:30:00Z", `{"energy":30,"state":"on"}`},              // 04:30 EET
			{"2024-03-30T21:30:00Z", `{"energy":5}`},                            // Sat 23:30 EET
			{"2024-03-30T22:30:00Z", `{"energy":7}`},                            // Sun 00:30 EET
			{"2024-03-31T20:30:00Z", `{"energy":9}`},                            // Sun 23:30 EEST
			{"2024-03-31T21:30:00Z", `{"energy":11}`},                           // Mon 00:30 EEST
		},
		"m2": {
			{"2024-10-27T00:45:00Z", `{"energy":1,"temp":19.0,"state":"on"}`}, // 03:45 EEST
			{"2024-03-31T10:00:00Z", `{"energy":50}`},                         // Sun 13:00 EEST
			{"2024-03-31T12:00:00Z", `{"energy":58}`},                         // Sun 15:00 EEST
			{"2024-10-31T21:30:00Z", `{"pulse":1}`},                           // Oct 31 23:30 EET
			{"2024-10-31T22:30:00Z", `{"pulse":2}`},                           // Nov 1 00:30 EET
		},
		"m3": {
			{"2024-10-27T01:15:00Z", `{"energy":100,"temp":7.25}`}, // 03:15 EET
		},
		"x1": {
			{"2024-10-27T00:30:00Z", `{"energy":1000}`}, // not a meter: in no report
		},
	} {
		var body []string
		for _, p := range pts {
			body = append(body, fmt.Sprintf(`{"ts":%d,"values":%s}`, utc(t, p.at), p.values))
			var m map[string]any
			json.Unmarshal([]byte(p.values), &m)
			if dev != "x1" {
				a.points += len(m)
			}
		}
		n.must(200, "POST", "/api/v1/"+a.tok[dev]+"/telemetry", "["+strings.Join(body, ",")+"]")
	}
	return a
}

// view saves a view (the JSON of its fields, the rest defaulted) and returns its id.
func (a *analytics) view(t *testing.T, body string) string {
	t.Helper()
	var v struct{ ID entityID }
	a.n.must(200, "POST", "/api/analytics/view", body, a.auth).JSON(t, &v)
	if v.ID.EntityType != "ANALYTICS_VIEW" || v.ID.ID == "" {
		t.Fatalf("saved view id: %+v", v.ID)
	}
	return v.ID.ID
}

// report builds a report with the JWT in the query and returns the body.
func (a *analytics) report(t *testing.T, body string, headers ...string) []byte {
	t.Helper()
	return a.n.must(200, "POST", "/apiAnalytics/publicApi/buildReport?jwt="+url.QueryEscape(a.jwt), body, headers...).Body
}

type table struct {
	ColumnLabels []string         `json:"columnLabels"`
	DataTable    []map[string]any `json:"dataTable"`
}

// rows turns a report body into rows of cells in column order, checking that the
// answer is exactly {columnLabels, dataTable} and every row has every label.
func rows(t *testing.T, body []byte) [][]any {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || len(raw) != 2 || raw["columnLabels"] == nil || raw["dataTable"] == nil {
		t.Fatalf("report is not exactly {columnLabels, dataTable}: %s", body)
	}
	var tb table
	if err := json.Unmarshal(body, &tb); err != nil {
		t.Fatal(err)
	}
	out := [][]any{tb.ColumnLabels2()}
	for _, r := range tb.DataTable {
		if len(r) != len(tb.ColumnLabels) {
			t.Fatalf("row %v lacks labels of %v", r, tb.ColumnLabels)
		}
		row := make([]any, len(tb.ColumnLabels))
		for i, l := range tb.ColumnLabels {
			row[i] = r[l]
		}
		out = append(out, row)
	}
	return out
}

func (tb table) ColumnLabels2() []any {
	out := make([]any, len(tb.ColumnLabels))
	for i, l := range tb.ColumnLabels {
		out[i] = l
	}
	return out
}

// wantTable compares a report with want, written as rows of cells (the first
// row being the labels); numbers compare as float64, nil as null.
func wantTable(t *testing.T, what string, body []byte, want ...[]any) {
	t.Helper()
	got := rows(t, body)
	norm := func(rs [][]any) string {
		var b strings.Builder
		for _, r := range rs {
			for i, c := range r {
				if i > 0 {
					b.WriteString(" | ")
				}
				switch v := c.(type) {
				case int:
					c = float64(v)
				case int64:
					c = float64(v)
				}
				fmt.Fprintf(&b, "%#v", c)
			}
			b.WriteByte('\n')
		}
		return b.String()
	}
	if g, w := norm(got), norm(want); g != w {
		t.Fatalf("%s:\ngot\n%swant\n%s", what, g, w)
	}
}

func req(id string, extra ...string) string {
	return `{"viewConfigId":"` + id + `"` + strings.Join(extra, "") + `}`
}

// checkAnalytics builds every report of the fixture on n and checks it; it
// returns the bodies by name for the cross-back-end comparison.
func checkAnalytics(t *testing.T, n *testNode) map[string]string {
	a := newAnalytics(t, n)
	bodies := map[string]string{}
	fall := fmt.Sprintf(`"range":{"type":"ABSOLUTE","startTs":%d,"endTs":%d}`, utc(t, fallDay), utc(t, fallEnd))
	spring := fmt.Sprintf(`"range":{"type":"ABSOLUTE","startTs":%d,"endTs":%d}`, utc(t, springDay), utc(t, springEnd))
	all := `"range":{"type":"ABSOLUTE","startTs":1,"endTs":4102444800000}`
	kyiv := `"timeZone":"Europe/Kyiv","source":{"deviceProfile":"meter"}`

	// History reaches ClickHouse through the spool: wait until every point counts.
	total := a.view(t, `{"name":"total",`+kyiv+`,`+all+`,"fields":[
		{"label":"n","source":"TELEMETRY","key":"energy","aggregation":"COUNT"},
		{"label":"t","source":"TELEMETRY","key":"temp","aggregation":"COUNT"},
		{"label":"s","source":"TELEMETRY","key":"state","aggregation":"COUNT"},
		{"label":"p","source":"TELEMETRY","key":"pulse","aggregation":"COUNT"}]}`)
	eventually(t, 15*time.Second, "all points reportable", func() bool {
		r := rows(t, a.report(t, req(total)))
		sum := 0.0
		for _, c := range r[1] {
			sum += c.(float64)
		}
		return sum == float64(a.points)
	})
	run := func(name, body string, headers ...string) []byte {
		t.Helper()
		b := a.report(t, body, headers...)
		bodies[name] = string(b)
		return b
	}

	// FULL_HOUR across the autumn change: 03:00–04:00 local happens twice (EEST,
	// then EET) and both hours are the one bucket "2024-10-27 03"; empty hours are
	// rows too, with SUM null and COUNT 0.
	hourly := a.view(t, `{"name":"hourly",`+kyiv+`,`+fall+`,"fields":[
		{"label":"Building","source":"ATTRIBUTE","key":"building","scope":"SERVER_SCOPE"},
		{"label":"Date","source":"DATE","grouping":"FULL_HOUR"},
		{"label":"sum","source":"TELEMETRY","key":"energy","aggregation":"SUM"},
		{"label":"n","source":"TELEMETRY","key":"energy","aggregation":"COUNT"}]}`)
	wantTable(t, "FULL_HOUR over the autumn DST change", run("hourly", req(hourly)),
		[]any{"Building", "Date", "sum", "n"},
		[]any{"A", "2024-10-27 00", nil, 0}, []any{"A", "2024-10-27 01", nil, 0}, []any{"A", "2024-10-27 02", nil, 0},
		[]any{"A", "2024-10-27 03", 31, 3}, []any{"A", "2024-10-27 04", 30, 1},
		[]any{"B", "2024-10-27 00", nil, 0}, []any{"B", "2024-10-27 01", nil, 0}, []any{"B", "2024-10-27 02", nil, 0},
		[]any{"B", "2024-10-27 03", 100, 1}, []any{"B", "2024-10-27 04", nil, 0})

	// The same as CSV, asked for with Accept.
	r := a.n.must(200, "POST", "/apiTrendz/publicApi/buildReport", req(hourly), "jwt: "+a.jwt, "Accept: text/csv")
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") {
		t.Fatalf("CSV content type %q", ct)
	}
	wantCSV := "Building,Date,sum,n\nA,2024-10-27 00,,0\nA,2024-10-27 01,,0\nA,2024-10-27 02,,0\nA,2024-10-27 03,31,3\nA,2024-10-27 04,30,1\n" +
		"B,2024-10-27 00,,0\nB,2024-10-27 01,,0\nB,2024-10-27 02,,0\nB,2024-10-27 03,100,1\nB,2024-10-27 04,,0\n"
	if string(r.Body) != wantCSV {
		t.Fatalf("CSV:\n%s\nwant\n%s", r.Body, wantCSV)
	}
	bodies["hourly.csv"] = string(r.Body)

	// Every aggregation, per device name, without a date: the whole range is one bucket.
	aggs := a.view(t, `{"name":"aggs",`+kyiv+`,`+fall+`,"fields":[
		{"label":"Device","source":"ENTITY_NAME"},
		{"label":"avg","source":"TELEMETRY","key":"energy","aggregation":"AVG"},
		{"label":"min","source":"TELEMETRY","key":"energy","aggregation":"MIN"},
		{"label":"max","source":"TELEMETRY","key":"energy","aggregation":"MAX"},
		{"label":"sum","source":"TELEMETRY","key":"energy","aggregation":"SUM"},
		{"label":"count","source":"TELEMETRY","key":"energy","aggregation":"COUNT"},
		{"label":"states","source":"TELEMETRY","key":"state","aggregation":"UNIQ"},
		{"label":"last","source":"TELEMETRY","key":"state","aggregation":"LATEST"},
		{"label":"lastTemp","source":"TELEMETRY","key":"temp","aggregation":"LATEST"},
		{"label":"avgTemp","source":"TELEMETRY","key":"temp","aggregation":"AVG"},
		{"label":"delta","source":"TELEMETRY","key":"energy","aggregation":"DELTA"}]}`)
	wantTable(t, "aggregations", run("aggs", req(aggs)),
		[]any{"Device", "avg", "min", "max", "sum", "count", "states", "last", "lastTemp", "avgTemp", "delta"},
		[]any{"m1", 20, 10, 30, 60, 3, 2, "on", 21.5, 21, 20},
		[]any{"m2", 1, 1, 1, 1, 1, 1, "on", 19, 19, 0},
		[]any{"m3", 100, 100, 100, 100, 1, 0, nil, 7.25, 7.25, 0})

	// Dimensions: name, label, type, owner, attributes of two types.
	dims := a.view(t, `{"name":"dims",`+kyiv+`,`+fall+`,"fields":[
		{"label":"Device","source":"ENTITY_NAME"},
		{"label":"Label","source":"ENTITY_LABEL"},
		{"label":"Type","source":"ENTITY_TYPE"},
		{"label":"Owner","source":"OWNER"},
		{"label":"Floor","source":"ATTRIBUTE","key":"floor","scope":"SERVER_SCOPE"},
		{"label":"Missing","source":"ATTRIBUTE","key":"nope","scope":"SHARED_SCOPE"},
		{"label":"n","source":"TELEMETRY","key":"energy","aggregation":"COUNT"}]}`)
	wantTable(t, "dimensions", run("dims", req(dims)),
		[]any{"Device", "Label", "Type", "Owner", "Floor", "Missing", "n"},
		[]any{"m1", "L1", "meter", a.tenant, 1, nil, 3},
		[]any{"m2", "L2", "meter", a.tenant, 2, nil, 1},
		[]any{"m3", nil, "meter", a.customer, 3, nil, 1})
	// Grouping by owner sums over the devices of each owner.
	owners := a.view(t, `{"name":"owners",`+kyiv+`,`+fall+`,"fields":[
		{"label":"Owner","source":"OWNER"},
		{"label":"sum","source":"TELEMETRY","key":"energy","aggregation":"SUM"}],
		"sort":[{"label":"sum","order":"DESC"}]}`)
	wantTable(t, "owner groups, sorted by sum descending", run("owners", req(owners)),
		[]any{"Owner", "sum"}, []any{a.customer, 100}, []any{a.tenant, 61})

	// RAW by day across the spring change: each bucket is a local midnight (epoch
	// ms text), the day of the change is 23 hours long; DELTA sums per device.
	daily := a.view(t, `{"name":"daily",`+kyiv+`,`+spring+`,"fields":[
		{"label":"Building","source":"ATTRIBUTE","key":"building","scope":"SERVER_SCOPE"},
		{"label":"Date","source":"DATE","grouping":"RAW","groupBy":"DAY"},
		{"label":"sum","source":"TELEMETRY","key":"energy","aggregation":"SUM"},
		{"label":"delta","source":"TELEMETRY","key":"energy","aggregation":"DELTA"}]}`)
	d30, d31, d01 := strconv.FormatInt(utc(t, "2024-03-29T22:00:00Z"), 10), strconv.FormatInt(utc(t, "2024-03-30T22:00:00Z"), 10),
		strconv.FormatInt(utc(t, "2024-03-31T21:00:00Z"), 10)
	wantTable(t, "RAW DAY over the spring DST change", run("daily", req(daily)),
		[]any{"Building", "Date", "sum", "delta"},
		[]any{"A", d30, 5, 0}, []any{"A", d31, 124, 10}, []any{"A", d01, 11, 0},
		[]any{"B", d30, nil, nil}, []any{"B", d31, nil, nil}, []any{"B", d01, nil, nil})
	// A request range replaces the view's: only Sunday (local) remains.
	wantTable(t, "request range", run("daily.range", req(daily, fmt.Sprintf(`,"rangeStartTs":%s,"rangeEndTs":%s`, d31, d01))),
		[]any{"Building", "Date", "sum", "delta"},
		[]any{"A", d31, 124, 10}, []any{"B", d31, nil, nil})
	// RAW by 6 hours counts from local midnight; the DST day's buckets stay on the wall clock.
	six := a.view(t, `{"name":"six",`+kyiv+`,`+spring+`,"fields":[
		{"label":"Date","source":"DATE","grouping":"RAW","groupBy":"HOUR","groupByAmount":6},
		{"label":"n","source":"TELEMETRY","key":"energy","aggregation":"COUNT"}]}`)
	r6 := rows(t, run("six", req(six)))
	if len(r6) != 1+12 {
		t.Fatalf("6-hour buckets over 3 days: %d rows: %v", len(r6)-1, r6)
	}
	for i, w := range []struct {
		at string
		n  float64
	}{{"2024-03-30T16:00:00Z", 1}, {"2024-03-30T22:00:00Z", 1}, {"2024-03-31T09:00:00Z", 2}, {"2024-03-31T15:00:00Z", 1}, {"2024-03-31T21:00:00Z", 1}} {
		found := false
		for _, row := range r6[1:] {
			if row[0] == strconv.FormatInt(utc(t, w.at), 10) {
				found = row[1] == w.n
			}
		}
		if !found {
			t.Fatalf("6-hour bucket %d (%s) should count %v: %v", i, w.at, w.n, r6)
		}
	}

	// Fixed options that fold the range: hour of day, day of week.
	hours := a.view(t, `{"name":"hours",`+kyiv+`,`+spring+`,"fields":[
		{"label":"Hour","source":"DATE","grouping":"HOUR"},
		{"label":"n","source":"TELEMETRY","key":"energy","aggregation":"COUNT"}]}`)
	want := [][]any{{"Hour", "n"}}
	for h := range 24 {
		c := map[int]int{0: 2, 13: 1, 15: 1, 23: 2}[h]
		want = append(want, []any{strconv.Itoa(h), c})
	}
	wantTable(t, "hour of day", run("hours", req(hours)), want...)
	days := a.view(t, `{"name":"days",`+kyiv+`,`+spring+`,"fields":[
		{"label":"Day","source":"DATE","grouping":"DAY"},
		{"label":"n","source":"TELEMETRY","key":"energy","aggregation":"COUNT"}],
		"sort":[{"label":"Day","order":"DESC"}]}`)
	wantTable(t, "day of week, sorted by date descending", run("days", req(days)),
		[]any{"Day", "n"}, []any{"Sunday", 4}, []any{"Saturday", 1}, []any{"Monday", 1})
	// Long.MIN and Long.MAX ("unbounded") bounds cover all of the history: the
	// range is cut to the years -9999 to 9999, where no wall time overflows.
	unbounded := fmt.Sprintf(`,"rangeStartTs":%d,"rangeEndTs":%d`, int64(math.MinInt64), int64(math.MaxInt64))
	wantTable(t, "day of week, unbounded", run("days.unbounded", req(days, unbounded)),
		[]any{"Day", "n"}, []any{"Sunday", 9}, []any{"Saturday", 1}, []any{"Friday", 0}, []any{"Thursday", 0},
		[]any{"Wednesday", 0}, []any{"Tuesday", 0}, []any{"Monday", 1})
	if got, want := rows(t, run("total.unbounded", req(total, unbounded))), rows(t, a.report(t, req(total))); !reflect.DeepEqual(got, want) {
		t.Fatalf("unbounded totals %v, want %v", got, want)
	}
	wantTable(t, "day of week, from 1 to Long.MAX", run("days.toMax", req(days, fmt.Sprintf(`,"rangeStartTs":1,"rangeEndTs":%d`, int64(math.MaxInt64)))),
		[]any{"Day", "n"}, []any{"Sunday", 9}, []any{"Saturday", 1}, []any{"Friday", 0}, []any{"Thursday", 0},
		[]any{"Wednesday", 0}, []any{"Tuesday", 0}, []any{"Monday", 1})
	// A timeline to Long.MAX has too many buckets to lay out: a 400, as in UTC,
	// not a table cut short; so has a range wholly past the year 9999.
	path := "/apiAnalytics/publicApi/buildReport?jwt=" + url.QueryEscape(a.jwt)
	if msg := errorBody(t, n.do("POST", path, req(daily, fmt.Sprintf(`,"rangeEndTs":%d`, int64(math.MaxInt64)))), 400); !strings.Contains(msg, "buckets") {
		t.Fatalf("RAW DAY to Long.MAX: %q", msg)
	}
	if msg := errorBody(t, n.do("POST", path, req(days, fmt.Sprintf(`,"rangeStartTs":%d,"rangeEndTs":%d`, int64(math.MaxInt64)-1, int64(math.MaxInt64)))), 400); !strings.Contains(msg, "9999") {
		t.Fatalf("a range past 9999: %q", msg)
	}
	// Timeline options with their labels, across a month boundary in the zone.
	month := fmt.Sprintf(`"range":{"type":"ABSOLUTE","startTs":%d,"endTs":%d}`, utc(t, "2024-10-30T22:00:00Z"), utc(t, "2024-11-01T22:00:00Z"))
	for _, g := range []struct {
		grouping string
		labels   []any
	}{
		{"YEARMONTH", []any{"2024-Oct", "2024-Nov"}},
		{"FULL_DATE", []any{"2024-10-31", "2024-11-01"}},
		{"START_OF_WEEK", []any{"2024-10-28"}},
		{"MONTH", []any{"October", "November"}},
		{"DATE", []any{"1", "31"}},
		{"FULL_QUARTER", []any{"2024-Q4"}},
		{"YEAR", []any{"2024"}},
		{"WEEK_OF_YEAR", []any{"W44"}},
		{"WEEK_OF_MONTH", []any{"1", "5"}},
		{"QUARTER", []any{"4"}},
		{"MINUTE", []any{"30"}},
		{"HOUR", []any{"0", "23"}},
		{"DAY", []any{"Thursday", "Friday"}},
		{"FULL_MINUTE", []any{"2024-10-31 23:30", "2024-11-01 00:30"}},
		{"FULL_HOUR", []any{"2024-10-31 23", "2024-11-01 00"}},
	} {
		id := a.view(t, `{"name":"g",`+kyiv+`,`+month+`,"fields":[
			{"label":"Date","source":"DATE","grouping":"`+g.grouping+`"},
			{"label":"sum","source":"TELEMETRY","key":"pulse","aggregation":"SUM"}]}`)
		got := rows(t, run("grouping."+g.grouping, req(id)))
		var labels []any // of the buckets with data: the others are there too, empty
		for _, row := range got[1:] {
			if row[1] != nil {
				labels = append(labels, row[0])
			}
		}
		if !reflect.DeepEqual(labels, g.labels) {
			t.Errorf("%s labels %v, want %v", g.grouping, labels, g.labels)
		}
	}

	// Filters: the view's values, an empty override keeps them, a list replaces them.
	filtered := a.view(t, `{"name":"filtered",`+kyiv+`,`+fall+`,"fields":[
		{"label":"Device","source":"ENTITY_NAME"},
		{"label":"n","source":"TELEMETRY","key":"energy","aggregation":"COUNT"}],
		"filters":[
		{"name":"Building","field":{"source":"ATTRIBUTE","key":"building","scope":"SERVER_SCOPE"},"condition":"ONE_OF","values":["A"]},
		{"name":"floor","field":{"source":"ATTRIBUTE","key":"floor","scope":"SERVER_SCOPE"},"condition":"GTE","values":[]},
		{"name":"notName","field":{"source":"ENTITY_NAME"},"condition":"NOT_ONE_OF","values":[]},
		{"name":"prefix","field":{"source":"ENTITY_NAME"},"condition":"STARTS_WITH","values":[]},
		{"name":"suffix","field":{"source":"ENTITY_LABEL"},"condition":"ENDS_WITH","values":[]},
		{"name":"part","field":{"source":"OWNER"},"condition":"CONTAINS","values":[]},
		{"name":"below","field":{"source":"ATTRIBUTE","key":"floor","scope":"SERVER_SCOPE"},"condition":"LT","values":[]}]}`)
	names := func(what, filters string, want ...string) {
		t.Helper()
		got := rows(t, run("filter."+what, req(filtered, `,"filters":`+filters)))
		var g []string
		for _, row := range got[1:] {
			g = append(g, row[0].(string))
		}
		if strings.Join(g, ",") != strings.Join(want, ",") {
			t.Errorf("filter %s: devices %v, want %v", what, g, want)
		}
	}
	names("view values", `{}`, "m1", "m2")
	names("empty arrays keep", `{"Building":[],"floor":[],"notName":[]}`, "m1", "m2")
	names("override", `{"Building":["B"]}`, "m3")
	names("case-insensitive name", `{"building":["A","B"]}`, "m1", "m2", "m3")
	names("GTE", `{"Building":["A","B"],"floor":["2"]}`, "m2", "m3")
	names("LT", `{"Building":["A","B"],"below":["2"]}`, "m1")
	names("NOT_ONE_OF", `{"notName":["m1"]}`, "m2")
	names("STARTS_WITH", `{"Building":["A","B"],"prefix":["m3","m2"]}`, "m2", "m3")
	names("ENDS_WITH (no label: no match)", `{"Building":["A","B"],"suffix":["2"]}`, "m2")
	names("CONTAINS", `{"Building":["A","B"],"part":["`+a.customer[1:3]+`"]}`, "m3")

	// A customer user's report covers only the customer's devices.
	cust := strings.TrimPrefix(n.login("customer@thingsboard.org", "customer"), "X-Authorization: Bearer ")
	wantTable(t, "customer user", []byte(n.must(200, "POST", "/apiAnalytics/publicApi/buildReport?jwt="+cust, req(dims)).Body),
		[]any{"Device", "Label", "Type", "Owner", "Floor", "Missing", "n"},
		[]any{"m3", nil, "meter", a.customer, 3, nil, 1})
	return bodies
}

// TestAnalytics checks every report rule on the embedded back end and on
// ClickHouse + Redis, then that both gave byte-identical bodies.
func TestAnalytics(t *testing.T) {
	got := map[string]map[string]string{}
	t.Run("embedded", func(t *testing.T) { got["embedded"] = checkAnalytics(t, startNode(t, nil)) })
	t.Run("clickhouse", func(t *testing.T) { got["clickhouse"] = checkAnalytics(t, newDeployment(t).node(t, nil)) })
	e, c := got["embedded"], got["clickhouse"]
	t.Logf("%d reports on embedded, %d on ClickHouse", len(e), len(c))
	if e == nil || c == nil {
		return
	}
	if len(e) != len(c) {
		t.Fatalf("%d reports on embedded, %d on ClickHouse", len(e), len(c))
	}
	for name, body := range e {
		if c[name] != body {
			t.Errorf("report %s differs:\nembedded   %s\nclickhouse %s", name, body, c[name])
		}
	}
}

// onBothBackEnds runs f on an embedded node and on a ClickHouse + Redis node.
func onBothBackEnds(t *testing.T, f func(t *testing.T, n *testNode)) { onBothNodes(t, nil, f) }

// otherTenantAdmin creates a tenant with an admin and returns the admin's header.
func otherTenantAdmin(t *testing.T, n *testNode, title string) string {
	t.Helper()
	sys := n.login("sysadmin@thingsboard.org", "sysadmin")
	var ten struct{ ID entityID }
	n.must(200, "POST", "/api/tenant", `{"title":"`+title+`"}`, sys).JSON(t, &ten)
	email := strings.ToLower(title) + "@example.com"
	var u struct{ ID entityID }
	n.must(200, "POST", "/api/user?sendActivationMail=false",
		`{"email":"`+email+`","authority":"TENANT_ADMIN","tenantId":{"entityType":"TENANT","id":"`+ten.ID.ID+`"}}`, sys).JSON(t, &u)
	link := string(n.must(200, "GET", "/api/user/"+u.ID.ID+"/activationLink", "", sys).Body)
	_, token, _ := strings.Cut(link, "activateToken=")
	n.must(200, "POST", "/api/noauth/activate", `{"activateToken":"`+token+`","password":"password1"}`)
	return n.login(email, "password1")
}

// TestAnalyticsViews: view CRUD, the validation 400s, paging, roles and tenant isolation.
func TestAnalyticsViews(t *testing.T) {
	onBothBackEnds(t, func(t *testing.T, n *testNode) {
		auth := n.tenantAuth()
		n.must(200, "POST", "/api/device", `{"name":"v1","type":"meter"}`, auth)
		valid := `"source":{"deviceProfile":"meter"},"fields":[{"label":"Device","source":"ENTITY_NAME"},` +
			`{"label":"e","source":"TELEMETRY","key":"energy","aggregation":"SUM"}]`
		var v struct {
			ID       entityID
			Name     string
			Type     string
			TimeZone string
			Range    struct{ Type, Preset string }
			Version  int
		}
		n.must(200, "POST", "/api/analytics/view", `{"name":"first",`+valid+`}`, auth).JSON(t, &v)
		if v.Type != "TABLE" || v.TimeZone != "UTC" || v.Range.Type != "RELATIVE" || v.Range.Preset != "THIS_WEEK" || v.Version != 1 {
			t.Fatalf("defaults of a saved view: %+v", v)
		}
		n.must(200, "POST", "/api/analytics/view", `{"id":{"entityType":"ANALYTICS_VIEW","id":"`+v.ID.ID+`"},"name":"renamed",`+valid+`}`, auth).JSON(t, &v)
		if v.Name != "renamed" || v.Version != 2 {
			t.Fatalf("updated view: %+v", v)
		}
		n.must(200, "GET", "/api/analytics/view/"+v.ID.ID, "", auth).JSON(t, &v)
		if v.Name != "renamed" {
			t.Fatalf("read back: %+v", v)
		}
		n.must(200, "POST", "/api/analytics/view", `{"name":"second",`+valid+`}`, auth)
		var page struct {
			Data          []struct{ Name string }
			TotalElements int
			HasNext       bool
		}
		n.must(200, "GET", "/api/analytics/views?pageSize=1&page=0&sortProperty=name&sortOrder=DESC", "", auth).JSON(t, &page)
		if page.TotalElements != 2 || !page.HasNext || len(page.Data) != 1 || page.Data[0].Name != "second" {
			t.Fatalf("page: %+v", page)
		}

		// Validation: each mistake is a 400 that names it.
		for _, c := range []struct{ body, msg string }{
			{`{"name":"x","source":{"deviceProfile":"nope"},"fields":[{"label":"D","source":"ENTITY_NAME"}]}`, "unknown source"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"e","source":"TELEMETRY","key":"energy"}]}`, "needs an aggregation"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"e","source":"TELEMETRY","key":"energy","aggregation":"MEDIAN"}]}`, "unknown aggregation"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"d","source":"DATE","grouping":"FORTNIGHT"}]}`, "unknown grouping"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"d","source":"DATE","grouping":"RAW","groupBy":"DECADE"}]}`, "unknown groupBy"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"d","source":"DATE","grouping":"RAW","groupBy":"DAY","groupByAmount":18014398509481984}]}`, "groupByAmount must be 0 to 1000000"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"a","source":"ENTITY_NAME"}],"filters":[{"name":"f","field":{"source":"ENTITY_NAME"},"condition":"GT","values":["NaN"]}]}`, "needs a number"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"a","source":"ENTITY_NAME"},{"label":"a","source":"ENTITY_TYPE"}]}`, "duplicate label"},
			{`{"name":"x","timeZone":"Mars/Olympus","source":{"deviceProfile":"meter"},"fields":[{"label":"a","source":"ENTITY_NAME"}]}`, "unknown time zone"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"a","source":"ENTITY_NAME"}],"filters":[{"name":"f","field":{"source":"COLOUR"}}]}`, "unknown field"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"a","source":"ENTITY_NAME"}],"filters":[{"name":"f","field":{"source":"TELEMETRY","key":"energy"}}]}`, "unknown field"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"a","source":"ENTITY_NAME"}],"filters":[{"name":"f","field":{"source":"ENTITY_NAME"},"condition":"GT","values":["abc"]}]}`, "needs a number"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"a","source":"COLOUR"}]}`, "unknown source"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"a","source":"ATTRIBUTE","key":"k","scope":"ANY"}]}`, "unknown scope"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"a","source":"ENTITY_NAME"}],"range":{"type":"RELATIVE","preset":"SOMETIME"}}`, "preset"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[{"label":"a","source":"ENTITY_NAME"}],"sort":[{"label":"b"}]}`, "no field label"},
			{`{"name":"","source":{"deviceProfile":"meter"},"fields":[{"label":"a","source":"ENTITY_NAME"}]}`, "name"},
			{`{"name":"x","source":{"deviceProfile":"meter"},"fields":[]}`, "fields"},
			{`{"name":`, "Invalid request body"},
		} {
			if msg := errorBody(t, n.do("POST", "/api/analytics/view", c.body, auth), 400); !strings.Contains(msg, c.msg) {
				t.Errorf("%s: message %q lacks %q", c.body, msg, c.msg)
			}
		}

		// Customer users read views but do not change them; another tenant does not see them.
		cust := n.login("customer@thingsboard.org", "customer")
		n.must(200, "GET", "/api/analytics/view/"+v.ID.ID, "", cust)
		errorBody(t, n.do("POST", "/api/analytics/view", `{"name":"c",`+valid+`}`, cust), 403)
		errorBody(t, n.do("DELETE", "/api/analytics/view/"+v.ID.ID, "", cust), 403)
		other := otherTenantAdmin(t, n, "Other")
		errorBody(t, n.do("GET", "/api/analytics/view/"+v.ID.ID, "", other), 404)
		errorBody(t, n.do("DELETE", "/api/analytics/view/"+v.ID.ID, "", other), 404)
		n.must(200, "GET", "/api/analytics/views?pageSize=10&page=0", "", other).JSON(t, &page)
		if page.TotalElements != 0 {
			t.Fatalf("another tenant lists %d views", page.TotalElements)
		}
		errorBody(t, n.do("GET", "/api/analytics/view/"+v.ID.ID, ""), 401)

		n.must(200, "DELETE", "/api/analytics/view/"+v.ID.ID, "", auth)
		errorBody(t, n.do("GET", "/api/analytics/view/"+v.ID.ID, "", auth), 404)
		errorBody(t, n.do("GET", "/api/analytics/view/not-a-uuid", "", auth), 400)
	})
}

// TestAnalyticsReportStatuses: 403 for a missing, bad or outdated JWT, 415, the
// 400s, another tenant's view, and the ways to pass the token.
func TestAnalyticsReportStatuses(t *testing.T) {
	onBothBackEnds(t, func(t *testing.T, n *testNode) {
		auth := n.tenantAuth()
		jwt := strings.TrimPrefix(auth, "X-Authorization: Bearer ")
		n.must(200, "POST", "/api/device", `{"name":"s1","type":"meter"}`, auth)
		var v struct{ ID entityID }
		n.must(200, "POST", "/api/analytics/view", `{"name":"s","source":{"deviceProfile":"meter"},`+
			`"fields":[{"label":"Device","source":"ENTITY_NAME"},{"label":"n","source":"TELEMETRY","key":"energy","aggregation":"COUNT"}],`+
			`"filters":[{"name":"Building","field":{"source":"ATTRIBUTE","key":"building","scope":"SERVER_SCOPE"}}]}`, auth).JSON(t, &v)
		body := req(v.ID.ID)
		path := "/apiAnalytics/publicApi/buildReport"
		want := `{"columnLabels":["Device","n"],"dataTable":[{"Device":"s1","n":0}]}`

		// The token: query jwt, header jwt, X-Authorization; on both paths.
		for _, r := range []response{
			n.must(200, "POST", path+"?jwt="+jwt, body),
			n.must(200, "POST", path, body, "jwt: "+jwt),
			n.must(200, "POST", path, body, auth),
			n.must(200, "POST", "/apiTrendz/publicApi/buildReport?jwt="+jwt, body),
		} {
			if string(r.Body) != want {
				t.Fatalf("report %s, want %s", r.Body, want)
			}
		}
		// 403: no token, a bad one, a refresh token.
		errorBody(t, n.do("POST", path, body), 403)
		errorBody(t, n.do("POST", path+"?jwt=abc.def.ghi", body), 403)
		errorBody(t, n.do("POST", path, body, "jwt: "+jwt+"x"), 403)
		var pair struct{ RefreshToken string }
		n.must(200, "POST", "/api/auth/login", `{"username":"tenant@thingsboard.org","password":"tenant"}`).JSON(t, &pair)
		errorBody(t, n.do("POST", path+"?jwt="+pair.RefreshToken, body), 403)
		// 415: no or another content type.
		errorBody(t, n.do("POST", path+"?jwt="+jwt, body, "Content-Type: text/plain"), 415)
		errorBody(t, n.do("POST", path+"?jwt="+jwt, ""), 415)
		n.must(200, "POST", path+"?jwt="+jwt, body, "Content-Type: application/json; charset=utf-8")
		// 400: bad bodies, unknown views, unknown filters, a bad range.
		for _, b := range []string{`{`, `[]`, `{"viewConfigId":42}`, `{"viewConfigId":"` + v.ID.ID + `","filters":{"Building":"A"}}`,
			`{}`, `{"viewConfigId":"nope"}`, req("3fa85f64-5717-4562-b3fc-2c963f66afa6"),
			req(v.ID.ID, `,"filters":{"Floor":["1"]}`), req(v.ID.ID, `,"rangeStartTs":2000,"rangeEndTs":1000`)} {
			errorBody(t, n.do("POST", path+"?jwt="+jwt, b), 400)
		}
		// Another tenant's view is unknown to it.
		other := strings.TrimPrefix(otherTenantAdmin(t, n, "Else"), "X-Authorization: Bearer ")
		if msg := errorBody(t, n.do("POST", path+"?jwt="+other, body), 400); !strings.Contains(msg, "Unknown view") {
			t.Fatalf("another tenant's view: %q", msg)
		}
		// A token outdated by a password change is refused.
		n.must(200, "POST", "/api/auth/changePassword", `{"currentPassword":"tenant","newPassword":"tenant2"}`, auth)
		errorBody(t, n.do("POST", path+"?jwt="+jwt, body), 403)
	})
}

// TestAnalyticsRelativeRange: a saved relative range follows the clock; a
// request range replaces it.
func TestAnalyticsRelativeRange(t *testing.T) {
	onBothBackEnds(t, func(t *testing.T, n *testNode) {
		a := newAnalytics(t, n)
		now := time.Now().UnixMilli()
		n.must(200, "POST", "/api/v1/"+a.tok["m1"]+"/telemetry", fmt.Sprintf(`[{"ts":%d,"values":{"fresh":1}},{"ts":%d,"values":{"fresh":2}}]`,
			now-3600_000, now-40*24*3600_000))
		id := a.view(t, `{"name":"recent","timeZone":"Europe/Berlin","source":{"deviceProfile":"meter"},
			"range":{"type":"RELATIVE","preset":"LAST_7_DAYS"},
			"fields":[{"label":"n","source":"TELEMETRY","key":"fresh","aggregation":"COUNT"}]}`)
		// ClickHouse gets history through the spool: wait for both points (whole range).
		eventually(t, 15*time.Second, "history in the back end", func() bool {
			r := rows(t, a.report(t, req(id, fmt.Sprintf(`,"rangeStartTs":1,"rangeEndTs":%d`, now+1))))
			return r[1][0] == 2.0
		})
		wantTable(t, "last 7 days", a.report(t, req(id)), []any{"n"}, []any{1})
		wantTable(t, "zero range keeps the view's", a.report(t, req(id, `,"rangeStartTs":0,"rangeEndTs":0`)), []any{"n"}, []any{1})
	})
}

// TestAnalyticsReportQueue: with one report thread and no queue, reports sent
// at once are either built (200, the right table) or refused with 429 and
// errorCode 33, never anything else, and a report after the burst is built
// again. Eight clients keep sending until one is refused: two reports overlap
// within a few tries on either back end (ClickHouse reports take milliseconds).
func TestAnalyticsReportQueue(t *testing.T) {
	tweak := func(c *config.Config) { c.Analytics.ReportThreads, c.Analytics.ReportQueue = 1, 0 }
	onBothNodes(t, tweak, func(t *testing.T, n *testNode) {
		auth := n.tenantAuth()
		jwt := strings.TrimPrefix(auth, "X-Authorization: Bearer ")
		n.must(200, "POST", "/api/device", `{"name":"q1","type":"meter"}`, auth)
		var v struct{ ID entityID }
		n.must(200, "POST", "/api/analytics/view", `{"name":"q","source":{"deviceProfile":"meter"},`+
			`"fields":[{"label":"Device","source":"ENTITY_NAME"},{"label":"n","source":"TELEMETRY","key":"energy","aggregation":"COUNT"}]}`, auth).JSON(t, &v)
		endpoint := n.URL + "/apiAnalytics/publicApi/buildReport?jwt=" + jwt
		const want = `{"columnLabels":["Device","n"],"dataTable":[{"Device":"q1","n":0}]}`
		var (
			refused  atomic.Bool
			mu       sync.Mutex
			problems []string
			wg       sync.WaitGroup
		)
		deadline := time.Now().Add(30 * time.Second)
		for range 8 {
			wg.Go(func() {
				for !refused.Load() && time.Now().Before(deadline) {
					resp, err := http.Post(endpoint, "application/json", strings.NewReader(req(v.ID.ID)))
					if err != nil {
						mu.Lock()
						problems = append(problems, err.Error())
						mu.Unlock()
						return
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					var e struct{ Status, ErrorCode int }
					switch {
					case resp.StatusCode == 200 && string(body) == want:
					case resp.StatusCode == 429 && json.Unmarshal(body, &e) == nil && e.Status == 429 && e.ErrorCode == 33 &&
						resp.Header.Get("Retry-After") == "1":
						refused.Store(true)
					default:
						mu.Lock()
						problems = append(problems, fmt.Sprintf("%d %s", resp.StatusCode, body))
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		if len(problems) > 0 {
			t.Fatalf("answers other than 200 or 429: %q", problems)
		}
		if !refused.Load() {
			t.Fatal("no report was refused in 30 s of eight clients with one report thread and no queue")
		}
		if r := n.must(200, "POST", "/apiAnalytics/publicApi/buildReport?jwt="+jwt, req(v.ID.ID)); string(r.Body) != want {
			t.Fatalf("report after the burst: %s", r.Body)
		}
	})
}

// onBothNodes is onBothBackEnds with a configuration tweak.
func onBothNodes(t *testing.T, tweak func(*config.Config), f func(t *testing.T, n *testNode)) {
	t.Run("embedded", func(t *testing.T) { f(t, startNode(t, tweak)) })
	t.Run("clickhouse", func(t *testing.T) { f(t, newDeployment(t).node(t, tweak)) })
}

// TestAnalyticsRepeatedPoints: a device that sends a point again (a retry of the
// same batch, or a new value at a ts already stored) has it counted once, with
// the later value, while its in-order points stay as they were. On ClickHouse this
// is the path where Redis tells the spool which rows repeat, the delivery marks
// their days and the report reads those days with FINAL and the rest without.
func TestAnalyticsRepeatedPoints(t *testing.T) {
	onBothBackEnds(t, func(t *testing.T, n *testNode) {
		a := newAnalytics(t, n)
		fall := fmt.Sprintf(`"range":{"type":"ABSOLUTE","startTs":%d,"endTs":%d}`, utc(t, fallDay), utc(t, fallEnd))
		id := a.view(t, `{"name":"repeats","timeZone":"Europe/Kyiv",`+fall+`,"source":{"deviceProfile":"meter"},"fields":[
			{"label":"Device","source":"ENTITY_NAME"},
			{"label":"sum","source":"TELEMETRY","key":"energy","aggregation":"SUM"},
			{"label":"count","source":"TELEMETRY","key":"energy","aggregation":"COUNT"}]}`)
		want := func(what string, m1 []any) {
			t.Helper()
			rows := [][]any{{"Device", "sum", "count"}, m1, {"m2", 1, 1}, {"m3", 100, 1}}
			// ClickHouse gets history through the spool: wait for the table.
			eventually(t, 15*time.Second, what, func() bool {
				got := a.report(t, req(id))
				return len(rowsOf(t, got)) == len(rows) && fmt.Sprint(rowsOf(t, got)) == fmt.Sprint(normRows(rows))
			})
			wantTable(t, what, a.report(t, req(id)), rows...)
		}
		want("as written", []any{"m1", 60, 3})
		// The device retries its first two points as they were, then rewrites the
		// second with a new value.
		retry := fmt.Sprintf(`[{"ts":%d,"values":{"energy":10}},{"ts":%d,"values":{"energy":20}}]`,
			utc(t, "2024-10-27T00:30:00Z"), utc(t, "2024-10-27T01:30:00Z"))
		n.must(200, "POST", "/api/v1/"+a.tok["m1"]+"/telemetry", retry)
		want("a batch sent twice", []any{"m1", 60, 3})
		n.must(200, "POST", "/api/v1/"+a.tok["m1"]+"/telemetry", fmt.Sprintf(`{"ts":%d,"values":{"energy":25}}`, utc(t, "2024-10-27T01:30:00Z")))
		want("a point rewritten", []any{"m1", 65, 3})
	})
}

// TestAnalyticsNumberValues: a floor that is the long 2 on one device and the
// double 2.0 on another (both print as 2) is one group, and a filter value "2"
// or "2.0" selects both. (Numeric text in JSON is stored as a number, so the
// string "1" apart from the number 1 is left to the engine's tests.)
func TestAnalyticsNumberValues(t *testing.T) {
	onBothBackEnds(t, func(t *testing.T, n *testNode) {
		a := &analytics{n: n, auth: n.tenantAuth()}
		a.jwt = strings.TrimPrefix(a.auth, "X-Authorization: Bearer ")
		for _, d := range []struct{ name, attrs string }{
			{"f1", `{"floor":2}`}, {"f2", `{"floor":2.0}`}, {"f3", `{"floor":1}`}, {"f5", `{"floor":2.5}`},
		} {
			var dev struct{ ID entityID }
			n.must(200, "POST", "/api/device", `{"name":"`+d.name+`","type":"lift"}`, a.auth).JSON(t, &dev)
			n.must(200, "POST", "/api/plugins/telemetry/DEVICE/"+dev.ID.ID+"/SERVER_SCOPE", d.attrs, a.auth)
		}
		floor := `{"source":"ATTRIBUTE","key":"floor","scope":"SERVER_SCOPE"}`
		byFloor := a.view(t, `{"name":"floors","source":{"deviceProfile":"lift"},"fields":[
			{"label":"Floor","source":"ATTRIBUTE","key":"floor","scope":"SERVER_SCOPE"},
			{"label":"n","source":"TELEMETRY","key":"x","aggregation":"COUNT"}]}`)
		wantTable(t, "groups by number", a.report(t, req(byFloor)),
			[]any{"Floor", "n"}, []any{1, 0}, []any{2, 0}, []any{2.5, 0})
		filtered := a.view(t, `{"name":"filtered","source":{"deviceProfile":"lift"},"fields":[
			{"label":"Device","source":"ENTITY_NAME"},
			{"label":"n","source":"TELEMETRY","key":"x","aggregation":"COUNT"}],"filters":[
			{"name":"Floor","field":`+floor+`,"condition":"ONE_OF","values":[]},
			{"name":"notFloor","field":`+floor+`,"condition":"NOT_ONE_OF","values":[]}]}`)
		for _, c := range []struct{ filters, want string }{
			{`{"Floor":["2"]}`, "f1,f2"},
			{`{"Floor":["2.0"]}`, "f1,f2"},
			{`{"Floor":["1"]}`, "f3"},
			{`{"Floor":["1.0"]}`, "f3"},
			{`{"Floor":["2.50"]}`, "f5"},
			{`{"notFloor":["2"]}`, "f3,f5"},
		} {
			var names []string
			for _, row := range rows(t, a.report(t, req(filtered, `,"filters":`+c.filters)))[1:] {
				names = append(names, row[0].(string))
			}
			if strings.Join(names, ",") != c.want {
				t.Errorf("filters %s: %v, want %s", c.filters, names, c.want)
			}
		}
	})
}

// TestAnalyticsFarFuture: daylight saving applies in every year, also after
// 2037 (past the zone's table) and in and after leap years such as 2040 and
// 2044, and up to the year 9999 with a Long.MAX range end.
func TestAnalyticsFarFuture(t *testing.T) {
	onBothBackEnds(t, func(t *testing.T, n *testNode) {
		a := &analytics{n: n, auth: n.tenantAuth()}
		a.jwt = strings.TrimPrefix(a.auth, "X-Authorization: Bearer ")
		var dev struct{ ID entityID }
		n.must(200, "POST", "/api/device", `{"name":"far","type":"far"}`, a.auth).JSON(t, &dev)
		var cred struct{ CredentialsID string }
		n.must(200, "GET", "/api/device/"+dev.ID.ID+"/credentials", "", a.auth).JSON(t, &cred)
		var body []string
		for _, at := range []string{"2041-07-01T12:00:00Z", "2044-07-01T12:00:00Z", "2045-01-15T12:00:00Z", "9999-07-01T12:00:00Z"} {
			body = append(body, fmt.Sprintf(`{"ts":%d,"values":{"x":1}}`, utc(t, at)))
		}
		n.must(200, "POST", "/api/v1/"+cred.CredentialsID+"/telemetry", "["+strings.Join(body, ",")+"]")
		kyiv := `"timeZone":"Europe/Kyiv","source":{"deviceProfile":"far"}`
		unbounded := fmt.Sprintf(`,"rangeStartTs":1,"rangeEndTs":%d`, int64(math.MaxInt64))
		hours := a.view(t, `{"name":"hours",`+kyiv+`,"fields":[
			{"label":"Hour","source":"DATE","grouping":"HOUR"},
			{"label":"n","source":"TELEMETRY","key":"x","aggregation":"COUNT"}]}`)
		// ClickHouse gets history through the spool: wait for every point.
		eventually(t, 15*time.Second, "all points reportable", func() bool {
			total := 0.0
			for _, row := range rows(t, a.report(t, req(hours, unbounded)))[1:] {
				total += row[1].(float64)
			}
			return total == 4
		})
		want := [][]any{{"Hour", "n"}}
		for h := range 24 {
			want = append(want, []any{strconv.Itoa(h), map[int]int{14: 1, 15: 3}[h]})
		}
		wantTable(t, "hour of day (EEST in July, EET in January)", a.report(t, req(hours, unbounded)), want...)
		fullHour := a.view(t, `{"name":"fullHour",`+kyiv+`,"fields":[
			{"label":"Date","source":"DATE","grouping":"FULL_HOUR"},
			{"label":"n","source":"TELEMETRY","key":"x","aggregation":"COUNT"}]}`)
		for _, y := range []string{"2041", "2044"} {
			r := fmt.Sprintf(`,"rangeStartTs":%d,"rangeEndTs":%d`, utc(t, y+"-07-01T11:00:00Z"), utc(t, y+"-07-01T13:00:00Z"))
			wantTable(t, "FULL_HOUR in "+y, a.report(t, req(fullHour, r)),
				[]any{"Date", "n"}, []any{y + "-07-01 14", 0}, []any{y + "-07-01 15", 1})
		}
	})
}

// rowsOf is rows of a report body, as wantTable compares them.
func rowsOf(t *testing.T, body []byte) [][]any { return normRows(rows(t, body)) }

// normRows turns whole numbers into float64, as JSON decodes them.
func normRows(rs [][]any) [][]any {
	out := make([][]any, len(rs))
	for i, r := range rs {
		out[i] = make([]any, len(r))
		for j, c := range r {
			if v, ok := c.(int); ok {
				c = float64(v)
			}
			out[i][j] = c
		}
	}
	return out
}
