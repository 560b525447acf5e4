package apitest

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestBinaryKill9Production kills the real binary with SIGKILL under load while
// ClickHouse is cut off, so acknowledged points exist only in the spool; after a
// restart on the same data folder every one of them reaches ClickHouse, once.
func TestBinaryKill9Production(t *testing.T) {
	d := newDeployment(t)
	px := newProxy(t, d.chAddr)
	port := freePort(t)
	env := []string{"HTTP_BIND_ADDRESS=127.0.0.1", fmt.Sprintf("HTTP_BIND_PORT=%d", port), "SLUICE_DATA_DIR=" + t.TempDir(),
		"SLUICE_DEMO=true", "CLICKHOUSE_ADDR=" + px.addr(), "CLICKHOUSE_DATABASE=" + d.database,
		"REDIS_ADDR=" + d.redisAddr, "REDIS_KEY_PREFIX=" + d.prefix, "SLUICE_SPOOL_FLUSH_INTERVAL_MS=100"}
	n := &testNode{t: t, URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	p := startBinary(t, n.URL, env...)
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "crash-production")

	var (
		mu       sync.Mutex
		acked    = map[int64]bool{}
		inFlight = map[int64]bool{} // no answer: the node died with the request
		count    atomic.Int64
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	client := &http.Client{Timeout: 10 * time.Second}
	for g := range 8 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				ts := int64(1_000_000 + g*1_000_000 + i)
				r, err := client.Post(n.URL+"/api/v1/"+token+"/telemetry", "application/json",
					strings.NewReader(fmt.Sprintf(`{"ts":%d,"values":{"seq":%d}}`, ts, ts)))
				if err != nil {
					mu.Lock()
					inFlight[ts] = true
					mu.Unlock()
					return // the node is gone
				}
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
				if r.StatusCode == 200 {
					mu.Lock()
					acked[ts] = true
					mu.Unlock()
					count.Add(1)
				}
			}
		})
	}
	eventually(t, 30*time.Second, "200 acknowledged writes", func() bool { return count.Load() >= 200 })
	px.cut()
	from := count.Load()
	eventually(t, 30*time.Second, "200 more acknowledged while ClickHouse is cut off", func() bool { return count.Load() >= from+200 })
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	stop.Store(true)
	wg.Wait()

	px.restore()
	startBinary(t, n.URL, env...)
	mu.Lock()
	defer mu.Unlock()
	waitExactly(t, n, auth, id, acked, inFlight, 30*time.Second)
	t.Logf("%d acknowledged points survived kill -9, %d of them only in the spool at the kill", len(acked), len(acked)-int(from))
}
