package apitest

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/config"
)

// privateRedis is a redis-server of one test, with the persistence
// configs/production.yaml recommends (appendonly yes, appendfsync always), so it
// can be killed and restarted without disturbing the shared one.
type privateRedis struct {
	t    *testing.T
	addr string
	dir  string
	cmd  *exec.Cmd
}

func startPrivateRedis(t *testing.T, addr, dir string) *privateRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is needed for the Redis restart test: %v", err)
	}
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--bind", host, "--port", port, "--dir", dir, "--appendonly", "yes",
		"--appendfsync", "always", "--save", "", "--daemonize", "no", "--logfile", "")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := &privateRedis{t: t, addr: addr, dir: dir, cmd: cmd}
	eventually(t, 30*time.Second, "private redis-server answering", func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer c.Close()
		fmt.Fprint(c, "PING\r\n")
		buf := make([]byte, 16)
		n, _ := c.Read(buf)
		return strings.HasPrefix(string(buf[:n]), "+PONG")
	})
	return r
}

func (r *privateRedis) kill() {
	r.cmd.Process.Kill()
	r.cmd.Wait()
}

// TestRedisRestart kills the node's Redis under load: while it is down the node
// answers 503 with the JSON error body (never a 500, never a hang), and once Redis
// is back on the same folder the node serves again without a restart, with every
// acknowledged device, attribute and point still there.
func TestRedisRestart(t *testing.T) {
	d := newDeployment(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	dir := t.TempDir()
	rd := startPrivateRedis(t, addr, dir)
	n := d.node(t, func(c *config.Config) { c.Redis.RedisAddr = addr })
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "redis-restart")
	n.must(200, "POST", "/api/plugins/telemetry/DEVICE/"+id+"/SERVER_SCOPE", `{"before":1}`, auth)
	acked := map[int64]bool{}
	for ts := int64(1); ts <= 50; ts++ {
		n.must(200, "POST", "/api/v1/"+token+"/telemetry", fmt.Sprintf(`{"ts":%d,"values":{"seq":%d}}`, ts, ts))
		acked[ts] = true
	}

	rd.kill()
	// Writes need Redis (latest values, attributes): a clear 503, never a 500.
	for ts := int64(1000); ts < 1010; ts++ {
		r := n.do("POST", "/api/v1/"+token+"/telemetry", fmt.Sprintf(`{"ts":%d,"values":{"seq":%d}}`, ts, ts))
		if r.Status == 200 {
			acked[ts] = true // served before the node noticed (the point is in the spool)
			continue
		}
		errorBody(t, r, 503)
	}
	errorBody(t, n.do("POST", "/api/plugins/telemetry/DEVICE/"+id+"/SERVER_SCOPE", `{"during":1}`, auth), 503)

	startPrivateRedis(t, addr, dir)
	// go-redis answers with its last dial error, without dialing, until its
	// once-a-second background dial succeeds: a request can still fail just after
	// another one passed, so wait for a write and a read to both succeed.
	eventually(t, 30*time.Second, "the node serving again after Redis restarted", func() bool {
		return n.do("POST", "/api/v1/"+token+"/telemetry", `{"ts":2000,"values":{"seq":2000}}`).Status == 200 &&
			n.do("GET", "/api/plugins/telemetry/DEVICE/"+id+"/values/attributes/SERVER_SCOPE?keys=before", "", auth).Status == 200
	})
	acked[2000] = true
	n.must(200, "GET", "/api/device/"+id, "", auth)
	if r := n.must(200, "GET", "/api/plugins/telemetry/DEVICE/"+id+"/values/attributes/SERVER_SCOPE?keys=before", "", auth); !strings.Contains(string(r.Body), `"before"`) {
		t.Fatalf("attribute saved before the restart: %s", r.Body)
	}
	eventually(t, 30*time.Second, "every acknowledged point in history", func() bool {
		got := historyTimestamps(t, n, auth, id)
		for ts := range acked {
			if !got[ts] {
				return false
			}
		}
		return true
	})
}
