package apitest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/config"
)

// ackedWriter posts telemetry with unique timestamps from several goroutines and
// remembers which were acknowledged (200) and how many were refused with 503.
type ackedWriter struct {
	mu      sync.Mutex
	acked   map[int64]bool
	refused int
	other   []string
}

func (w *ackedWriter) run(n *testNode, token string, from int64, writers, perWriter int) {
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range perWriter {
				ts := from + int64(g*perWriter+i)
				r := n.do("POST", "/api/v1/"+token+"/telemetry", fmt.Sprintf(`{"ts":%d,"values":{"seq":%d}}`, ts, ts))
				w.mu.Lock()
				switch r.Status {
				case 200:
					w.acked[ts] = true
				case 503:
					w.refused++
					if !strings.Contains(string(r.Body), "SLUICE_SPOOL_MAX_BYTES") {
						w.other = append(w.other, "503 without the setting: "+string(r.Body))
					}
				default:
					w.other = append(w.other, fmt.Sprintf("%d %s", r.Status, r.Body))
				}
				w.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// historyTimestamps reads every stored point of key "seq" and fails on duplicates.
func historyTimestamps(t *testing.T, n *testNode, auth, id string) map[int64]bool {
	t.Helper()
	var got map[string][]struct{ Ts int64 }
	n.must(200, "GET", "/api/plugins/telemetry/DEVICE/"+id+"/values/timeseries?keys=seq&startTs=0&endTs=99999999999&limit=1000000", "", auth).JSON(t, &got)
	seen := map[int64]bool{}
	for _, p := range got["seq"] {
		if seen[p.Ts] {
			t.Fatalf("ts %d stored twice", p.Ts)
		}
		seen[p.Ts] = true
	}
	return seen
}

// waitExactly waits until history holds every acknowledged point once, and
// nothing else except points in inFlight: requests that got no answer because the
// node was killed may or may not have been stored.
func waitExactly(t *testing.T, n *testNode, auth, id string, acked, inFlight map[int64]bool, within time.Duration) {
	t.Helper()
	var got map[int64]bool
	eventually(t, within, fmt.Sprintf("%d acknowledged points in ClickHouse", len(acked)), func() bool {
		got = historyTimestamps(t, n, auth, id)
		return len(got) >= len(acked)
	})
	for ts := range acked {
		if !got[ts] {
			t.Fatalf("acknowledged point %d lost", ts)
		}
	}
	for ts := range got {
		if !acked[ts] && !inFlight[ts] {
			t.Fatalf("point %d stored but never acknowledged (%d stored, %d acknowledged)", ts, len(got), len(acked))
		}
	}
}

// TestClickHouseOutage cuts ClickHouse off under load: writes are still
// acknowledged from the spool, past the spool's limit devices get 503 naming the
// setting, and when ClickHouse is back every acknowledged point is stored exactly once.
func TestClickHouseOutage(t *testing.T) {
	d := newDeployment(t)
	px := newProxy(t, d.chAddr)
	d.chAddr = px.addr()
	// 1,000 single-point requests during the outage spool 20-40 KiB: a group
	// commit's record names the device's series once (40-odd bytes), and each
	// further point of it takes under 10. 8 KiB refuses about three in four.
	n := d.node(t, func(c *config.Config) { c.Spool.SpoolMaxBytes = 8 << 10 })
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "outage")
	w := &ackedWriter{acked: map[int64]bool{}}

	w.run(n, token, 1_000_000, 4, 25) // ClickHouse up
	px.cut()
	w.run(n, token, 2_000_000, 4, 250) // ClickHouse down: the spool fills, then 503
	if w.refused == 0 {
		t.Fatal("no 503 although the spool limit was far exceeded")
	}
	t.Logf("during the outage: %d acknowledged in all, %d refused with 503", len(w.acked), w.refused)
	// Latest values still answer during the outage (they live in Redis).
	if got := n.latestStrict(auth, id, "seq"); !strings.Contains(got, `"value":`) {
		t.Fatalf("latest during outage: %s", got)
	}
	px.restore()
	waitExactly(t, n, auth, id, w.acked, nil, 30*time.Second)
	if len(w.other) > 0 {
		t.Fatalf("unexpected answers: %v", w.other[:min(5, len(w.other))])
	}
	t.Logf("acknowledged %d, refused %d", len(w.acked), w.refused)
}

// TestStartDuringClickHouseOutage: a node started while ClickHouse is down
// comes up, acknowledges telemetry into its spool and answers history reads
// with 503; once ClickHouse is back it migrates and delivers every point.
func TestStartDuringClickHouseOutage(t *testing.T) {
	d := newDeployment(t)
	px := newProxy(t, d.chAddr)
	d.chAddr = px.addr()
	px.cut()
	n := d.node(t, nil)
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "started-without-clickhouse")
	w := &ackedWriter{acked: map[int64]bool{}}
	w.run(n, token, 3_000_000, 2, 20)
	if len(w.acked) != 40 || w.refused != 0 || len(w.other) > 0 {
		t.Fatalf("acknowledged %d, refused %d, other %v", len(w.acked), w.refused, w.other)
	}
	r := n.do("GET", "/api/plugins/telemetry/DEVICE/"+id+"/values/timeseries?keys=seq&startTs=0&endTs=9999999999999", "", auth)
	errorBody(t, r, 503)
	px.restore()
	// The node tries every 5 s; reads answer once it has reached ClickHouse.
	eventually(t, 30*time.Second, "history readable after ClickHouse came back", func() bool {
		return n.do("GET", "/api/plugins/telemetry/DEVICE/"+id+"/values/timeseries?keys=seq&startTs=0&endTs=1", "", auth).Status == 200
	})
	waitExactly(t, n, auth, id, w.acked, nil, 30*time.Second)
}
