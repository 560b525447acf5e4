package apitest

import (
	"bytes"
	"compress/gzip"
	"context"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/config"
	"github.com/sluice-iot/sluice/node"
)

// ingestStats is the body of GET /api/device/{id}/ingestStats.
type ingestStats struct {
	DeviceID       string           `json:"deviceId"`
	Accepted       int64            `json:"accepted"`
	Stored         int64            `json:"stored"`
	Rejected       map[string]int64 `json:"rejected"`
	RejectedPoints map[string]int64 `json:"rejectedPoints"`
}

func (n *testNode) ingestStats(auth, id string) ingestStats {
	n.t.Helper()
	var s ingestStats
	n.must(200, "GET", "/api/device/"+id+"/ingestStats", "", auth).JSON(n.t, &s)
	return s
}

// waitIngestStats waits until the device's stats match want (they are flushed
// every second).
func (n *testNode) waitIngestStats(auth, id string, want ingestStats) {
	n.t.Helper()
	want.DeviceID = id
	var got ingestStats
	eventually(n.t, 20*time.Second, "ingest stats", func() bool {
		got = n.ingestStats(auth, id)
		return got.DeviceID == want.DeviceID && got.Accepted == want.Accepted && got.Stored == want.Stored &&
			maps.Equal(got.Rejected, want.Rejected) && maps.Equal(got.RejectedPoints, want.RejectedPoints)
	})
}

func gzipBody(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestIngestStats: a device's accepted, stored and rejected counts over HTTP on
// the embedded back end, with the access of GET /api/device/{id}, kept across a
// restart.
func TestIngestStats(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.HTTP.BindAddress, cfg.HTTP.BindPort = "127.0.0.1", 0
	cfg.Data.Dir, cfg.Data.Demo = dir, true
	cfg.Limits.MaxBodySize = 4096
	first, err := node.Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() { // when the test fails before the restart
		if !stopped {
			first.Shutdown(context.Background())
		}
	})
	n := &testNode{t: t, URL: "http://" + first.Addr().String(), node: first}
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "stats")
	telemetry := "/api/v1/" + token + "/telemetry"

	n.must(200, "POST", telemetry, `{"a":1,"b":2}`)
	n.must(200, "POST", telemetry, `[{"ts":1,"values":{"c":3}}]`)
	n.must(200, "POST", "/api/plugins/telemetry/DEVICE/"+id+"/timeseries/ANY", `{"r":1}`, auth) // REST writes count too
	n.must(400, "POST", telemetry, `{"a":`)
	n.must(400, "POST", telemetry, `{"a":`)
	n.must(415, "POST", telemetry, `{"a":1}`, "Content-Encoding: br")
	n.must(413, "POST", telemetry, gzipBody(t, `{"big":"`+strings.Repeat("x", 8192)+`"}`), "Content-Encoding: gzip")
	n.must(401, "POST", "/api/v1/NO_SUCH_TOKEN/telemetry", `{"a":1}`) // no device: not counted
	// Embedded: points are stored when acknowledged.
	want := ingestStats{Accepted: 4, Stored: 4,
		Rejected: map[string]int64{"invalid": 2, "unsupported": 1, "too_large": 1}, RejectedPoints: map[string]int64{}}
	n.waitIngestStats(auth, id, want)

	// Access as GET /api/device/{id}: the demo customer does not see this device,
	// the system administrator has no devices, a bad id is 400, an unknown one 404.
	errorBody(t, n.do("GET", "/api/device/"+id+"/ingestStats", "", n.login("customer@thingsboard.org", "customer")), 403)
	errorBody(t, n.do("GET", "/api/device/"+id+"/ingestStats", "", n.login("sysadmin@thingsboard.org", "sysadmin")), 403)
	errorBody(t, n.do("GET", "/api/device/"+id+"/ingestStats", ""), 401)
	errorBody(t, n.do("GET", "/api/device/not-a-uuid/ingestStats", "", auth), 400)
	errorBody(t, n.do("GET", "/api/device/784f394c-42b6-435a-983c-b7beff2784f9/ingestStats", "", auth), 404)

	for _, series := range []string{`sluice_points_stored_total`, `sluice_telemetry_rejected_requests_total{reason="invalid"}`,
		`sluice_telemetry_rejected_requests_total{reason="too_large"}`, `sluice_ingest_stats_flush_errors_total`} {
		if n.metricValue(t, series) < 0 {
			t.Errorf("%s missing from /metrics", series)
		}
	}

	// The counts are on disk: a restarted node has them, and adds to them.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopped = true
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	n = startNode(t, func(c *config.Config) { *c = cfg })
	auth = n.tenantAuth()
	n.must(200, "POST", telemetry, `{"a":1}`)
	want.Accepted, want.Stored = 5, 5
	n.waitIngestStats(auth, id, want)
}

// TestIngestStatsTwoNodes: on ClickHouse + Redis, counts of a device written
// through node A are read on node B once A has flushed them, and points count
// as stored once the spool delivered them.
func TestIngestStatsTwoNodes(t *testing.T) {
	d := newDeployment(t)
	a := d.node(t, nil)
	b := d.node(t, nil)
	auth := a.tenantAuth()
	id, token := a.createDevice(auth, "stats")
	a.must(200, "POST", "/api/v1/"+token+"/telemetry", `{"a":1,"b":2}`)
	b.must(200, "POST", "/api/v1/"+token+"/telemetry", `{"c":3}`)
	a.must(400, "POST", "/api/v1/"+token+"/telemetry", `[1]`)
	b.waitIngestStats(auth, id, ingestStats{Accepted: 3, Stored: 3,
		Rejected: map[string]int64{"invalid": 1}, RejectedPoints: map[string]int64{}})
	if got := a.ingestStats(auth, id); got.Accepted != 3 {
		t.Fatalf("node A: %+v", got)
	}
	for _, series := range []string{`sluice_points_stored_total`, `sluice_spool_rows`, `sluice_clickhouse_insert_duration_seconds_count`} {
		if a.metricValue(t, series) < 0 {
			t.Errorf("%s missing from /metrics", series)
		}
	}
}
