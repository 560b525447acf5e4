package apitest

import (
	"fmt"
	"strings"
	"testing"
)

// TestTelemetryRead covers latest, history, aggregation and key lists of the
// /api/plugins/telemetry read API.
func TestTelemetryRead(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "reader")
	n.must(200, "POST", "/api/v1/"+token+"/telemetry",
		`[{"ts":1000,"values":{"t":10,"s":"a"}},{"ts":1500,"values":{"t":20}},{"ts":2000,"values":{"t":30.5,"s":"b"}},{"ts":3500,"values":{"t":40}}]`)
	base := "/api/plugins/telemetry/DEVICE/" + id
	get := func(path, want string) {
		t.Helper()
		r := n.must(200, "GET", base+path, "", auth)
		if string(r.Body) != want {
			t.Fatalf("GET %s\n got %s\nwant %s", path, r.Body, want)
		}
	}
	// Latest: strings by default, native with useStrictDataTypes.
	get("/values/timeseries?keys=t,s", `{"t":[{"ts":3500,"value":"40"}],"s":[{"ts":2000,"value":"b"}]}`)
	get("/values/timeseries", `{"s":[{"ts":2000,"value":"b"}],"t":[{"ts":3500,"value":"40"}]}`)
	get("/values/timeseries?keys=s&useStrictDataTypes=true", `{"s":[{"ts":2000,"value":"b"}]}`)
	// A missing key in a latest query answers value null.
	r := n.must(200, "GET", base+"/values/timeseries?keys=nope", "", auth)
	if !strings.HasPrefix(string(r.Body), `{"nope":[{"ts":`) || !strings.HasSuffix(string(r.Body), `"value":null}]}`) {
		t.Fatalf("missing key: %s", r.Body)
	}
	// History: [startTs, endTs), DESC by default, limit, ASC.
	get("/values/timeseries?keys=t&startTs=1000&endTs=3500", `{"t":[{"ts":2000,"value":"30.5"},{"ts":1500,"value":"20"},{"ts":1000,"value":"10"}]}`)
	get("/values/timeseries?keys=t&startTs=1000&endTs=3501&limit=2", `{"t":[{"ts":3500,"value":"40"},{"ts":2000,"value":"30.5"}]}`)
	get("/values/timeseries?keys=t&startTs=0&endTs=9999&orderBy=ASC&limit=1", `{"t":[{"ts":1000,"value":"10"}]}`)
	get("/values/timeseries/history?keys=t&startTs=1500&endTs=1501&useStrictDataTypes=true", `{"t":[{"ts":1500,"value":20}]}`)
	get("/values/timeseries?keys=t,s&startTs=5000&endTs=6000", `{}`)
	// Aggregation: buckets [start, start+interval), point at the bucket midpoint.
	get("/values/timeseries?keys=t&startTs=1000&endTs=3000&interval=1000&agg=AVG&orderBy=ASC", `{"t":[{"ts":1500,"value":"15.0"},{"ts":2500,"value":"30.5"}]}`)
	get("/values/timeseries?keys=t&startTs=1000&endTs=3000&interval=1000&agg=SUM&orderBy=ASC&useStrictDataTypes=true", `{"t":[{"ts":1500,"value":30},{"ts":2500,"value":30.5}]}`)
	get("/values/timeseries?keys=t&startTs=1000&endTs=4000&interval=3000&agg=COUNT&useStrictDataTypes=true", `{"t":[{"ts":2500,"value":4}]}`)
	get("/values/timeseries?keys=t&startTs=1000&endTs=4000&interval=3000&agg=MAX&useStrictDataTypes=true", `{"t":[{"ts":2500,"value":40.0}]}`)
	get("/values/timeseries?keys=t&startTs=1000&endTs=1600&interval=1000&agg=MIN&useStrictDataTypes=true", `{"t":[{"ts":1300,"value":10}]}`)
	// agg with interval 0 is no aggregation.
	get("/values/timeseries?keys=t&startTs=1000&endTs=1600&agg=MIN&orderBy=ASC", `{"t":[{"ts":1000,"value":"10"},{"ts":1500,"value":"20"}]}`)
	get("/keys/timeseries", `["s","t"]`)
	// As ThingsBoard: buckets oldest first whatever orderBy says (it orders raw
	// points only); orderBy in any case; an interval under a second counts as a
	// second against the 700-bucket cap; a raw read with endTs before startTs is
	// empty; each key once.
	get("/values/timeseries?keys=t&startTs=1000&endTs=3000&interval=1000&agg=AVG", `{"t":[{"ts":1500,"value":"15.0"},{"ts":2500,"value":"30.5"}]}`)
	get("/values/timeseries?keys=t&startTs=1000&endTs=3000&interval=1000&agg=AVG&orderBy=DESC", `{"t":[{"ts":1500,"value":"15.0"},{"ts":2500,"value":"30.5"}]}`)
	get("/values/timeseries?keys=t&startTs=0&endTs=9999&orderBy=asc&limit=1", `{"t":[{"ts":1000,"value":"10"}]}`)
	get("/values/timeseries?keys=t&startTs=0&endTs=10000&interval=10&agg=COUNT&useStrictDataTypes=true", `{"t":[{"ts":1005,"value":1},{"ts":1505,"value":1},{"ts":2005,"value":1},{"ts":3505,"value":1}]}`)
	get("/values/timeseries?keys=t&startTs=3000&endTs=1000", `{}`)
	get("/values/timeseries?keys=t,t&key=t&startTs=1000&endTs=1001", `{"t":[{"ts":1000,"value":"10"}]}`)
	get("/values/timeseries?keys=t,t", `{"t":[{"ts":3500,"value":"40"}]}`)
	get("/values/timeseries?keys=t&startTs=1000&endTs=1001&intervalType=MONTH&timeZone=Europe/Kyiv", `{"t":[{"ts":1000,"value":"10"}]}`)

	// Errors.
	errorBody(t, n.do("GET", base+"/values/timeseries?keys=t&startTs=0&endTs=1000000&interval=1&agg=AVG", "", auth), 400)
	errorBody(t, n.do("GET", base+"/values/timeseries?keys=t&startTs=x&endTs=1", "", auth), 400)
	errorBody(t, n.do("GET", base+"/values/timeseries?keys=t&startTs=0&endTs=10&interval=1&agg=MEDIAN", "", auth), 400)
	get("/values/timeseries?keys=t&startTs=0", `{"t":[{"ts":3500,"value":"40"}]}`) // one of the two: a latest read, as ThingsBoard routes it
	errorBody(t, n.do("GET", base+"/values/timeseries/history?keys=t&startTs=0", "", auth), 400)
	errorBody(t, n.do("GET", base+"/values/timeseries?keys=t&startTs=0&endTs=10&interval=-5&agg=COUNT", "", auth), 400)
	errorBody(t, n.do("GET", base+"/values/timeseries?keys=t&startTs=0&endTs=10&limit=0", "", auth), 400)
}

// TestTelemetryCalendar reads aggregates by calendar week, month and quarter
// in a time zone, with ThingsBoard's boundaries (its TimeUtilsTest).
func TestTelemetryCalendar(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "calendar")
	const (
		start   = 1704899727000 // Wednesday, January 10, 2024 15:15:27 UTC
		sun14   = 1705183200000 // Sunday, January 14, 0:00 in Kyiv (+02:00)
		feb1    = 1706738400000 // February 1, 0:00 in Kyiv
		feb1Ams = 1706742000000 // February 1, 0:00 in Amsterdam (+01:00)
		end     = feb1 + 1
	)
	n.must(200, "POST", "/api/v1/"+token+"/telemetry", fmt.Sprintf(
		`[{"ts":%d,"values":{"v":1}},{"ts":%d,"values":{"v":2}},{"ts":%d,"values":{"v":4}},{"ts":%d,"values":{"v":8}},{"ts":%d,"values":{"v":16}}]`,
		start, sun14-1, sun14, feb1-1, feb1))
	get := func(query, want string) {
		t.Helper()
		path := "/api/plugins/telemetry/DEVICE/" + id + "/values/timeseries?keys=v&agg=SUM&useStrictDataTypes=true&" +
			fmt.Sprintf("startTs=%d&endTs=%d&", start, end) + query
		if r := n.must(200, "GET", path, "", auth); string(r.Body) != want {
			t.Fatalf("GET %s\n got %s\nwant %s", path, r.Body, want)
		}
	}
	point := func(ts int64, v int) string { return fmt.Sprintf(`{"ts":%d,"value":%d}`, ts, v) }
	series := func(points ...string) string { return `{"v":[` + strings.Join(points, ",") + `]}` }
	mid := func(a, b int64) int64 { return a + (b-a)/2 }
	const week = 7 * 24 * 3600 * 1000
	// Sunday to Saturday: the first week is clipped to the start, the week of
	// January 21 is empty, the last is clipped to the end.
	get("intervalType=WEEK&timeZone=Europe/Kyiv", series(point(mid(start, sun14), 3), point(mid(sun14, sun14+week), 4), point(mid(sun14+2*week, end), 24)))
	// Monday to Sunday: January 14 belongs to the first week; interval is not used.
	get("intervalType=WEEK_ISO&timeZone=Europe/Kyiv&interval=1", series(point(mid(start, sun14+86400000), 7), point(mid(sun14+2*week+86400000, end), 24)))
	get("intervalType=MONTH&timeZone=Europe/Kyiv", series(point(mid(start, feb1), 15), point(feb1, 16)))
	get("intervalType=MONTH&timeZone=GMT%2B2", series(point(mid(start, feb1), 15), point(feb1, 16)))
	// February starts an hour later in Amsterdam, after the end.
	get("intervalType=MONTH&timeZone=Europe/Amsterdam", series(point(mid(start, min(end, feb1Ams)), 31)))
	get("intervalType=QUARTER&timeZone=Europe/Kyiv&orderBy=DESC", series(point(mid(start, end), 31)))
	// Without a zone: UTC; without an aggregation the type is not used.
	get("intervalType=MONTH", series(point(mid(start, end), 31))) // February 1 UTC is after the end
	r := n.must(200, "GET", fmt.Sprintf("/api/plugins/telemetry/DEVICE/%s/values/timeseries?keys=v&startTs=%d&endTs=%d&intervalType=MONTH&timeZone=Nowhere&limit=1", id, start, end), "", auth)
	if want := fmt.Sprintf(`{"v":[{"ts":%d,"value":"16"}]}`, feb1); string(r.Body) != want {
		t.Fatalf("raw read with an intervalType: %s, want %s", r.Body, want)
	}
	// More than 700 weeks is refused, as ThingsBoard counts them.
	errorBody(t, n.do("GET", fmt.Sprintf("/api/plugins/telemetry/DEVICE/%s/values/timeseries?keys=v&agg=SUM&startTs=0&endTs=%d&intervalType=WEEK", id, 701*week), "", auth), 400)
	n.must(200, "GET", fmt.Sprintf("/api/plugins/telemetry/DEVICE/%s/values/timeseries?keys=v&agg=SUM&startTs=0&endTs=%d&intervalType=WEEK", id, 700*week), "", auth)

	// An empty range, or an end before the start by less than a step, is one
	// bucket of 1 ms at the start, as ThingsBoard's aggregation reads it.
	for _, q := range []string{
		fmt.Sprintf("startTs=%d&endTs=%d&interval=1000", feb1, feb1),
		fmt.Sprintf("startTs=%d&endTs=%d&interval=1000", feb1, feb1-999),
		fmt.Sprintf("startTs=%d&endTs=%d&intervalType=MONTH", feb1, feb1),
	} {
		path := "/api/plugins/telemetry/DEVICE/" + id + "/values/timeseries?keys=v&agg=COUNT&useStrictDataTypes=true&" + q
		if r := n.must(200, "GET", path, "", auth); string(r.Body) != series(point(feb1, 1)) {
			t.Fatalf("GET %s: %s", path, r.Body)
		}
	}
	// A step or more before it: ThingsBoard's negative number of intervals.
	b := errorBody(t, n.do("GET", fmt.Sprintf("/api/plugins/telemetry/DEVICE/%s/values/timeseries?keys=v&agg=SUM&startTs=%d&endTs=%d&interval=1000", id, feb1, feb1-2000), "", auth), 400)
	if !strings.Contains(b, "Number of intervals is to high - -2") {
		t.Fatalf("end two steps before the start: %s", b)
	}
}

func TestTelemetryRESTWritesAndDeletes(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	id, _ := n.createDevice(auth, "rest-writes")
	base := "/api/plugins/telemetry/DEVICE/" + id
	n.must(200, "POST", base+"/timeseries/ANY", `[{"ts":1000,"values":{"a":1,"b":2}},{"ts":2000,"values":{"a":3}}]`, auth)
	n.must(200, "POST", base+"/attributes/SERVER_SCOPE", `{"building":"A","floor":3}`, auth)
	n.must(200, "POST", base+"/SHARED_SCOPE", `{"target":21}`, auth)                          // V1 form
	n.must(200, "POST", "/api/plugins/telemetry/"+id+"/SHARED_SCOPE", `{"mode":"eco"}`, auth) // V1 device form

	var attrs []struct {
		LastUpdateTs int64  `json:"lastUpdateTs"`
		Key          string `json:"key"`
		Value        any    `json:"value"`
	}
	// "active" is every device's derived server attribute (README "Device
	// activity"); this one never made a request.
	n.must(200, "GET", base+"/values/attributes", "", auth).JSON(t, &attrs)
	if len(attrs) != 5 || attrs[0].Key != "active" || attrs[0].Value != false {
		t.Fatalf("attributes: %+v", attrs)
	}
	for _, a := range attrs {
		if a.LastUpdateTs == 0 {
			t.Fatalf("no lastUpdateTs: %+v", a)
		}
	}
	r := n.must(200, "GET", base+"/values/attributes/SERVER_SCOPE?keys=floor", "", auth)
	if !strings.Contains(string(r.Body), `"key":"floor","value":3}`) {
		t.Fatalf("server attributes: %s", r.Body)
	}
	if r := n.must(200, "GET", base+"/keys/attributes", "", auth); string(r.Body) != `["active","building","floor","mode","target"]` {
		t.Fatalf("attribute keys: %s", r.Body)
	}
	if r := n.must(200, "GET", base+"/keys/attributes/SHARED_SCOPE", "", auth); string(r.Body) != `["mode","target"]` {
		t.Fatalf("shared keys: %s", r.Body)
	}

	n.must(200, "DELETE", base+"/SERVER_SCOPE?keys=floor", "", auth)
	if r := n.must(200, "GET", base+"/keys/attributes/SERVER_SCOPE", "", auth); string(r.Body) != `["active","building"]` {
		t.Fatalf("after delete: %s", r.Body)
	}
	n.must(200, "DELETE", base+"/timeseries/delete?keys=a&startTs=0&endTs=1500&deleteLatest=false", "", auth)
	if r := n.must(200, "GET", base+"/values/timeseries?keys=a&startTs=0&endTs=5000", "", auth); string(r.Body) != `{"a":[{"ts":2000,"value":"3"}]}` {
		t.Fatalf("after range delete: %s", r.Body)
	}
	n.must(200, "DELETE", base+"/timeseries/delete?keys=a,b&deleteAllDataForKeys=true", "", auth)
	if r := n.must(200, "GET", base+"/keys/timeseries", "", auth); string(r.Body) != `[]` {
		t.Fatalf("after full delete: %s", r.Body)
	}

	f := func(method, path, body string, status int) {
		t.Helper()
		errorBody(t, n.do(method, path, body, auth), status)
	}
	f("POST", base+"/attributes/CLIENT_SCOPE", `{"a":1}`, 400)
	f("POST", base+"/attributes/NO_SCOPE", `{"a":1}`, 400)
	f("POST", base+"/attributes/SERVER_SCOPE", `{}`, 400)
	f("POST", base+"/attributes/SERVER_SCOPE", `{"a":null}`, 400)
	f("POST", base+"/attributes/SERVER_SCOPE", `[1]`, 400)
	f("POST", base+"/timeseries/ANY", `{}`, 400)
	f("POST", base+"/timeseries/ANY", `{"a":`, 400)
	f("DELETE", base+"/SERVER_SCOPE", ``, 400)
	f("DELETE", base+"/timeseries/delete?keys=a", ``, 400)
	f("DELETE", base+"/timeseries/delete?keys=a&startTs=&endTs=", ``, 400) // empty is null to Spring
	if b := errorBody(t, n.do("DELETE", base+"/timeseries/delete", "", auth), 400); !strings.Contains(b, "Empty keys") {
		t.Fatalf("no keys: %s", b) // keys are checked before the range, as ThingsBoard
	}
	f("GET", base+"/values/timeseries?keys=a&startTs=&endTs=", ``, 400)
	f("GET", base+"/values/timeseries?keys=a&startTs=0&endTs=1&limit=2147483648", ``, 400)
	f("GET", "/api/plugins/telemetry/DEVICE/not-a-uuid/values/timeseries", ``, 400)
	f("GET", "/api/plugins/telemetry/DEVICE/3f1ec9c0-0000-4000-8000-000000000000/values/timeseries", ``, 404)
	f("GET", "/api/plugins/telemetry/ASSET/"+id+"/values/timeseries", ``, 400)
}

func TestTelemetryAccess(t *testing.T) {
	n := startNode(t, nil)
	tenant := n.tenantAuth()
	id, _ := n.createDevice(tenant, "guarded")
	path := "/api/plugins/telemetry/DEVICE/" + id + "/values/timeseries"
	errorBody(t, n.do("GET", path, ""), 401)
	errorBody(t, n.do("GET", path, "", "X-Authorization: Bearer not.a.jwt"), 401)
	errorBody(t, n.do("GET", path, "", n.login("sysadmin@thingsboard.org", "sysadmin")), 403)
	// A customer user sees only its customer's devices; this one is unassigned.
	errorBody(t, n.do("GET", path, "", n.login("customer@thingsboard.org", "customer")), 403)
	// Authorization works as a fallback header.
	n.must(200, "GET", path, "", "Authorization: "+strings.TrimPrefix(tenant, "X-Authorization: "))
}
