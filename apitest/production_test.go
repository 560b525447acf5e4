package apitest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/config"
	"github.com/sluice-iot/sluice/internal/testenv"
	"github.com/sluice-iot/sluice/storage/clickhouse"
	"github.com/sluice-iot/sluice/storage/redis"
)

// services returns the ClickHouse and Redis addresses (see internal/testenv).
func services(t *testing.T) (chAddr, redisAddr string) {
	t.Helper()
	env := testenv.Service(t, "CLICKHOUSE_ADDR", "REDIS_ADDR")
	return env[0], env[1]
}

// deployment is one ClickHouse database and one Redis key prefix, fresh per test,
// that any number of nodes share.
type deployment struct {
	chAddr, redisAddr string
	database, prefix  string
}

func newDeployment(t *testing.T) deployment {
	t.Helper()
	ch, rd := services(t)
	var b [6]byte
	rand.Read(b[:])
	name := hex.EncodeToString(b[:])
	d := deployment{chAddr: ch, redisAddr: rd, database: "sluice_apitest_" + name, prefix: "sluiceapitest:" + name + ":"}
	// Registered first, so it runs after the nodes of the test have stopped.
	t.Cleanup(func() {
		ctx := context.Background()
		if s, err := clickhouse.Open(ctx, clickhouse.Options{Addrs: []string{ch}, Database: d.database}); err == nil {
			s.Drop(ctx)
			s.Close()
		}
		if s, err := redis.Open(ctx, redis.Options{Addrs: []string{rd}, Prefix: d.prefix}); err == nil {
			s.Drop(ctx)
			s.Close()
		}
	})
	return d
}

// node starts a node of the deployment; tweak may change its configuration.
func (d deployment) node(t *testing.T, tweak func(*config.Config)) *testNode {
	t.Helper()
	return startNode(t, func(c *config.Config) {
		c.ClickHouse.CHAddr = d.chAddr
		c.ClickHouse.CHDatabase = d.database
		c.Redis.RedisAddr = d.redisAddr
		c.Redis.RedisPrefix = d.prefix
		c.Spool.SpoolFlushInterval = 100
		if tweak != nil {
			tweak(c)
		}
	})
}

// eventually polls f until it is true, for at most d.
func eventually(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTwoNodes: a device created on one node is usable on the other, data written
// through one is read through the other (latest at once, history within 2 s), and
// a device deleted on one is refused by the other within 1 s.
func TestTwoNodes(t *testing.T) {
	d := newDeployment(t)
	a := d.node(t, nil)
	b := d.node(t, nil)
	authA := a.tenantAuth()
	authB := "X-Authorization: Bearer " + strings.TrimPrefix(authA, "X-Authorization: Bearer ") // A's token works on B

	id, token := a.createDevice(authA, "shared")
	b.must(200, "POST", "/api/v1/"+token+"/telemetry", `{"ts":1000,"values":{"t":1}}`)
	a.must(200, "POST", "/api/v1/"+token+"/telemetry", `{"ts":2000,"values":{"t":2}}`)

	// Latest values are visible at once on both nodes.
	for _, n := range []*testNode{a, b} {
		if got := n.latestStrict(authB, id, "t"); got != `{"t":[{"ts":2000,"value":2}]}` {
			t.Fatalf("latest on %s: %s", n.URL, got)
		}
	}
	// History reaches ClickHouse through the spools within 2 s.
	history := "/api/plugins/telemetry/DEVICE/" + id + "/values/timeseries?keys=t&startTs=0&endTs=5000"
	eventually(t, 2*time.Second, "history on node B", func() bool {
		return string(b.must(200, "GET", history, "", authB).Body) == `{"t":[{"ts":2000,"value":"2"},{"ts":1000,"value":"1"}]}`
	})

	// A cached token is refused on B within 1 s of its deletion on A.
	b.must(200, "POST", "/api/v1/"+token+"/telemetry", `{"cached":1}`)
	a.must(200, "DELETE", "/api/device/"+id, "", authA)
	eventually(t, time.Second, "deleted device refused on node B", func() bool {
		return b.do("POST", "/api/v1/"+token+"/telemetry", `{"late":1}`).Status == 401
	})

	// Attributes and entities are shared too.
	id2, token2 := b.createDevice(authB, "second")
	a.must(200, "POST", "/api/v1/"+token2+"/attributes", `{"fw":"v2"}`)
	if r := b.must(200, "GET", "/api/v1/"+token2+"/attributes?clientKeys=fw", ""); string(r.Body) != `{"client":{"fw":"v2"}}` {
		t.Fatalf("attributes through B: %s", r.Body)
	}
	a.must(200, "GET", "/api/device/"+id2, "", authA)
}

// TestProductionReads reruns the essentials of the read tests on the production
// back ends.
func TestProductionReads(t *testing.T) {
	d := newDeployment(t)
	n := d.node(t, nil)
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "reads")
	n.must(200, "POST", "/api/v1/"+token+"/telemetry",
		`[{"ts":1000,"values":{"t":10,"s":"a"}},{"ts":1500,"values":{"t":20}},{"ts":2000,"values":{"t":30.5,"s":"b"}},{"ts":3500,"values":{"t":40}}]`)
	base := "/api/plugins/telemetry/DEVICE/" + id
	get := func(path, want string) {
		t.Helper()
		eventually(t, 2*time.Second, path, func() bool { return string(n.must(200, "GET", base+path, "", auth).Body) == want })
	}
	get("/values/timeseries?keys=t,s", `{"t":[{"ts":3500,"value":"40"}],"s":[{"ts":2000,"value":"b"}]}`)
	get("/values/timeseries?keys=t&startTs=1000&endTs=3500", `{"t":[{"ts":2000,"value":"30.5"},{"ts":1500,"value":"20"},{"ts":1000,"value":"10"}]}`)
	get("/values/timeseries?keys=t&startTs=1000&endTs=3000&interval=1000&agg=AVG&orderBy=ASC", `{"t":[{"ts":1500,"value":"15.0"},{"ts":2500,"value":"30.5"}]}`)
	get("/values/timeseries?keys=t&startTs=1000&endTs=4000&interval=3000&agg=COUNT&useStrictDataTypes=true", `{"t":[{"ts":2500,"value":4}]}`)
	get("/keys/timeseries", `["s","t"]`)
}
