package apitest

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricValue reads one sample of /metrics; -1 when the series is absent.
func (n *testNode) metricValue(t *testing.T, series string) float64 {
	t.Helper()
	body := string(n.must(200, "GET", "/metrics", "").Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}

// TestMetrics: /metrics counts requests by route pattern (never the token in the
// path), accepted points, and shows the node's open polls.
func TestMetrics(t *testing.T) {
	n := startNode(t, nil)
	route := `route="/api/v1/{token}/telemetry",method="POST"`
	before := max(n.metricValue(t, `sluice_http_requests_total{`+route+`,status="200"}`), 0)
	accepted := n.metricValue(t, `sluice_points_accepted_total`)
	n.must(200, "POST", "/api/v1/"+n.Token+"/telemetry", `{"a":1,"b":2}`)
	n.must(400, "POST", "/api/v1/"+n.Token+"/telemetry", `{"a":`)

	// Counters are per process and other tests may run alongside: at least.
	if got := n.metricValue(t, `sluice_http_requests_total{`+route+`,status="200"}`); got < before+1 {
		t.Fatalf("200 telemetry requests: %v, want at least %v", got, before+1)
	}
	if got := n.metricValue(t, `sluice_http_requests_total{`+route+`,status="400"}`); got < 1 {
		t.Fatalf("400 telemetry requests: %v", got)
	}
	if got := n.metricValue(t, `sluice_points_accepted_total`); got < accepted+2 {
		t.Fatalf("accepted points: %v, want at least %v", got, accepted+2)
	}
	res := n.openPoll(n.Token, "?timeout=30000")
	eventually(t, 10*time.Second, "one open poll on /metrics", func() bool {
		return n.metricValue(t, `sluice_long_polls_open`) == 1
	})
	n.must(200, "POST", "/api/plugins/telemetry/DEVICE/"+n.node.Bootstrap.DemoDeviceID.String()+"/SHARED_SCOPE", `{"x":1}`, n.tenantAuth())
	<-res
	body := string(n.must(200, "GET", "/metrics", "").Body)
	if regexp.MustCompile(n.Token).MatchString(body) {
		t.Fatal("a device token appears in /metrics")
	}
	for _, name := range []string{`sluice_ingest_queued_requests`, `sluice_http_request_duration_seconds_bucket`, `go_goroutines`} {
		if !regexp.MustCompile(`(?m)^` + name).MatchString(body) {
			t.Errorf("%s missing from /metrics", name)
		}
	}
}

// TestMetricsProduction: on ClickHouse + Redis the spool and ClickHouse insert
// metrics move once telemetry is delivered.
func TestMetricsProduction(t *testing.T) {
	d := newDeployment(t)
	n := d.node(t, nil)
	auth := n.tenantAuth()
	_, token := n.createDevice(auth, "metrics")
	inserted := max(n.metricValue(t, `sluice_clickhouse_inserted_rows_total`), 0)
	n.must(200, "POST", "/api/v1/"+token+"/telemetry", `{"a":1}`)
	eventually(t, 20*time.Second, "delivery to ClickHouse on /metrics", func() bool {
		return n.metricValue(t, `sluice_clickhouse_inserted_rows_total`) > inserted &&
			n.metricValue(t, `sluice_spool_rows`) == 0
	})
	for _, series := range []string{`sluice_spool_bytes`, `sluice_redis_errors_total`, `sluice_clickhouse_insert_errors_total`, `sluice_spool_delivered_rows_total`} {
		if n.metricValue(t, series) < 0 {
			t.Errorf("%s missing from /metrics", series)
		}
	}
}

// TestRequestID: every answer carries X-Request-Id; a sane id from the client is
// echoed, anything else replaced.
func TestRequestID(t *testing.T) {
	n := startNode(t, nil)
	a := n.must(200, "GET", "/healthz", "").Header.Get("X-Request-Id")
	b := n.must(200, "GET", "/healthz", "").Header.Get("X-Request-Id")
	if a == "" || a == b {
		t.Fatalf("generated ids %q, %q: want distinct, non-empty", a, b)
	}
	if got := n.do("POST", "/api/v1/NO_TOKEN/telemetry", `{"a":1}`, "X-Request-Id: lb-42.abc_X").Header.Get("X-Request-Id"); got != "lb-42.abc_X" {
		t.Fatalf("echoed id on an error answer: %q", got)
	}
	if got := n.must(200, "GET", "/healthz", "", "X-Request-Id: bad id\twith junk").Header.Get("X-Request-Id"); got == "" || strings.ContainsAny(got, " \t") {
		t.Fatalf("insane id not replaced: %q", got)
	}
}
