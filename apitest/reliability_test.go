package apitest

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/loadtest"
)

// TestReliabilityCrashUnderLoad is the crash test of `make test-reliability`: the
// load generator sends points with unique timestamps for several devices over 64
// connections, the real binary is killed with SIGKILL while requests are in flight
// and restarted on the same folder, twice; then every acknowledged point is read
// back exactly once, on the embedded default and on ClickHouse + Redis.
func TestReliabilityCrashUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the binary under load")
	}
	t.Run("embedded", func(t *testing.T) {
		crashUnderLoad(t, "SLUICE_DATA_DIR="+t.TempDir())
	})
	t.Run("clickhouse+redis", func(t *testing.T) {
		d := newDeployment(t)
		crashUnderLoad(t, "SLUICE_DATA_DIR="+t.TempDir(), "CLICKHOUSE_ADDR="+d.chAddr, "CLICKHOUSE_DATABASE="+d.database,
			"REDIS_ADDR="+d.redisAddr, "REDIS_KEY_PREFIX="+d.prefix, "SLUICE_SPOOL_FLUSH_INTERVAL_MS=100")
	})
}

// ackLog records, per device, the timestamps acknowledged and those whose request
// got no answer (the node died with it: stored or not).
type ackLog struct {
	mu       sync.Mutex
	acked    []map[int64]bool
	inFlight []map[int64]bool
	count    atomic.Int64
}

func crashUnderLoad(t *testing.T, env ...string) {
	const (
		devices     = 8
		connections = 64
		kills       = 2
	)
	port := freePort(t)
	env = append(env, "HTTP_BIND_ADDRESS=127.0.0.1", fmt.Sprintf("HTTP_BIND_PORT=%d", port), "SLUICE_DEMO=true")
	n := &testNode{t: t, URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	p := startBinary(t, n.URL, env...)
	auth := n.tenantAuth()
	ids, paths := make([]string, devices), make([]string, devices)
	log := &ackLog{acked: make([]map[int64]bool, devices), inFlight: make([]map[int64]bool, devices)}
	for i := range devices {
		id, token := n.createDevice(auth, fmt.Sprintf("crash-%d", i))
		ids[i], paths[i] = id, "/api/v1/"+token+"/telemetry"
		log.acked[i], log.inFlight[i] = map[int64]bool{}, map[int64]bool{}
	}

	for round := range kills {
		stop := make(chan struct{})
		done := make(chan error, 1)
		// Timestamps are unique over rounds, workers and requests.
		base := int64(round+1) * 1_000_000_000
		ts := func(worker int, seq uint64) int64 { return base + int64(worker)*10_000_000 + int64(seq) }
		go func() {
			_, err := loadtest.Run(loadtest.Config{
				Addr: strings.TrimPrefix(n.URL, "http://"), Connections: connections, Duration: time.Minute,
				Timeout: 10 * time.Second, Stop: stop,
				Generate: func(worker int, seq uint64, r *loadtest.Request) {
					v := strconv.FormatInt(ts(worker, seq), 10)
					r.Path = paths[worker%devices]
					r.Body = append(r.Body[:0], `{"ts":`+v+`,"values":{"seq":`+v+`}}`...)
					r.Points = 1
				},
				Observe: func(worker int, seq uint64, _ *loadtest.Request, status int, err error) {
					dev, at := worker%devices, ts(worker, seq)
					log.mu.Lock()
					defer log.mu.Unlock()
					switch {
					case status == 200:
						log.acked[dev][at] = true
						log.count.Add(1)
					case err != nil:
						log.inFlight[dev][at] = true
					}
				},
			})
			done <- err
		}()
		from := log.count.Load()
		eventually(t, 60*time.Second, "2,000 acknowledged points", func() bool { return log.count.Load() >= from+2000 })
		p.cmd.Process.Signal(syscall.SIGKILL) // with requests in flight on 64 connections
		<-p.exited
		close(stop)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		p = startBinary(t, n.URL, env...)
	}

	log.mu.Lock()
	defer log.mu.Unlock()
	for i, id := range ids {
		waitExactly(t, n, auth, id, log.acked[i], log.inFlight[i], 60*time.Second)
	}
	t.Logf("%d acknowledged points over %d devices survived %d kills, each stored once", log.count.Load(), devices, kills)
}
