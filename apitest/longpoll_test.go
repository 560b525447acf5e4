package apitest

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/config"
)

// pollClient waits on long polls; its timeout only turns a hung poll into a
// failure instead of a hung test.
var pollClient = &http.Client{
	Timeout:   60 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 1100},
}

// poll starts GET /api/v1/{token}/attributes/updates with query (e.g.
// "?timeout=200") and delivers the answer; a transport error is status 0 with the
// error text as body.
func (n *testNode) poll(token, query string) <-chan response {
	return n.async("GET", "/api/v1/"+token+"/attributes/updates"+query, "")
}

// openPoll starts a poll and returns once the node holds it (subscribed), so a
// change made afterwards must reach it.
func (n *testNode) openPoll(token, query string) <-chan response {
	n.t.Helper()
	before := n.node.Engine().OpenPolls()
	res := n.poll(token, query)
	n.waitPolls(before + 1)
	return res
}

// waitPolls waits until the node holds want long polls.
func (n *testNode) waitPolls(want int64) {
	n.t.Helper()
	eventually(n.t, 10*time.Second, fmt.Sprintf("%d polls open", want), func() bool {
		return n.node.Engine().OpenPolls() == want
	})
}

// delivered checks that a poll answered 200 application/json with exactly want.
func delivered(t *testing.T, res <-chan response, want string) {
	t.Helper()
	r := <-res
	if r.Status != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("poll: %d %q %s, want 200 application/json %s", r.Status, r.Header.Get("Content-Type"), r.Body, want)
	}
	if got := compactJSON(t, r.Body); got != want {
		t.Fatalf("poll delivered %s, want %s", got, want)
	}
}

// timedOut checks that a poll answered 408 with an empty body.
func timedOut(t *testing.T, res <-chan response) {
	t.Helper()
	if r := <-res; r.Status != 408 || len(r.Body) != 0 {
		t.Fatalf("poll: %d %q, want 408 with an empty body", r.Status, r.Body)
	}
}

// TestSharedAttributeLongPoll: a poll gets exactly the keys of the next
// SHARED_SCOPE save or delete made through REST while it is open, nothing of the
// other scopes, nothing of changes before it; 408 empty at the timeout.
func TestSharedAttributeLongPoll(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "poller")
	shared := "/api/plugins/telemetry/DEVICE/" + id + "/SHARED_SCOPE"

	// A change before the poll is not queued for it.
	n.must(200, "POST", shared, `{"before":1}`, auth)
	timedOut(t, n.poll(token, "?timeout=200"))

	// Only the keys of that save, with native types as GET attributes answers them.
	res := n.openPoll(token, "?timeout=30000")
	n.must(200, "POST", shared, `{"fw":"v1.2","target":23,"ratio":0.5,"whole":42.0,"on":true,"cfg":{"a":[1,2]}}`, auth)
	delivered(t, res, `{"fw":"v1.2","target":23,"ratio":0.5,"whole":42.0,"on":true,"cfg":{"a":[1,2]}}`)
	if r := n.must(200, "GET", "/api/v1/"+token+"/attributes?sharedKeys=target,whole", ""); string(r.Body) != `{"shared":{"target":23,"whole":42.0}}` {
		t.Fatalf("GET attributes: %s", r.Body)
	}

	// Client and server scope changes are not delivered; the shared change after them is.
	res = n.openPoll(token, "?timeout=30000")
	n.must(200, "POST", "/api/v1/"+token+"/attributes", `{"client":1}`)
	n.must(200, "POST", "/api/plugins/telemetry/DEVICE/"+id+"/SERVER_SCOPE", `{"server":1}`, auth)
	n.must(200, "DELETE", "/api/plugins/telemetry/DEVICE/"+id+"/SERVER_SCOPE?keys=server", "", auth)
	n.must(200, "POST", "/api/plugins/telemetry/"+id+"/SHARED_SCOPE", `{"v1path":"yes"}`, auth) // V1 path
	delivered(t, res, `{"v1path":"yes"}`)

	// Deletions: the keys that existed, in the request's order.
	res = n.openPoll(token, "?timeout=30000")
	n.must(200, "DELETE", shared+"?keys=target,fw,never", "", auth)
	delivered(t, res, `{"deleted":["target","fw"]}`)

	// Timeout answers 408 with an empty body; nothing changed meanwhile.
	timedOut(t, n.poll(token, "?timeout=200"))

	// Bad timeout 400, unknown token 401 (JSON error bodies).
	errorBody(t, n.do("GET", "/api/v1/"+token+"/attributes/updates?timeout=soon", ""), 400)
	errorBody(t, n.do("GET", "/api/v1/"+token+"/attributes/updates?timeout=-5", ""), 400)
	errorBody(t, n.do("GET", "/api/v1/NO_SUCH_TOKEN/attributes/updates?timeout=200", ""), 401)

	// New credentials end the open poll at once with 408, as ThingsBoard closes
	// the device's sessions; the device polls again with its new token.
	res = n.openPoll(token, "?timeout=30000")
	token = "NEW_" + token
	n.must(200, "POST", "/api/device/credentials",
		`{"deviceId":{"entityType":"DEVICE","id":"`+id+`"},"credentialsType":"ACCESS_TOKEN","credentialsId":"`+token+`"}`, auth)
	timedOut(t, res)

	// A device deleted while it polls gets 403 "Device was deleted!".
	res = n.openPoll(token, "?timeout=30000")
	n.must(200, "DELETE", "/api/device/"+id, "", auth)
	if msg := errorBody(t, <-res, 403); msg != "Device was deleted!" {
		t.Fatalf("deleted device: %q", msg)
	}
	n.waitPolls(0)
}

// TestLongPollTimeoutClamp: a timeout above SLUICE_LONG_POLL_MAX_TIMEOUT, and the
// 60 s default, end at the maximum.
func TestLongPollTimeoutClamp(t *testing.T) {
	n := startNode(t, func(c *config.Config) { c.HTTP.LongPollMaxTimeout = 100 })
	timedOut(t, n.poll(n.Token, "?timeout=600000"))
	timedOut(t, n.poll(n.Token, ""))
	timedOut(t, n.poll(n.Token, "?timeout=0"))
}

// TestManyIdlePolls: 1,000 polls wait at once on one node, which keeps serving
// meanwhile, and all of them answer 408.
func TestManyIdlePolls(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 1,000 connections")
	}
	const polls = 1000
	// One device's polls (the node's capacity is what is measured): no per-device cap.
	n := startNode(t, func(c *config.Config) { c.HTTP.LongPollMaxPerDevice = 0 })
	results := make([]<-chan response, polls)
	// Each poll outlives waitPolls' 10 s, so on a loaded CI machine the first
	// ones do not time out before the last ones have opened (a 3 s timeout did).
	for i := range results {
		results[i] = n.poll(n.Token, "?timeout=12000")
	}
	n.waitPolls(polls)
	n.must(200, "GET", "/healthz", "")
	n.must(200, "POST", "/api/v1/"+n.Token+"/telemetry", `{"busy":1}`)
	n.must(200, "GET", "/api/v1/"+n.Token+"/attributes", "")

	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := make(map[int]int)
	for _, res := range results {
		wg.Go(func() {
			r := <-res
			mu.Lock()
			statuses[r.Status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses[408] != polls {
		t.Fatalf("answers by status: %v, want %d × 408", statuses, polls)
	}
	n.waitPolls(0)
	n.must(200, "GET", "/healthz", "")
}

// TestLongPollAcrossNodes: the device polls node B while REST writes go through
// node A; the change crosses over Redis to B's one subscription.
func TestLongPollAcrossNodes(t *testing.T) {
	d := newDeployment(t)
	a := d.node(t, nil)
	b := d.node(t, nil)
	auth := a.tenantAuth()
	id, token := a.createDevice(auth, "remote-poller")
	shared := "/api/plugins/telemetry/DEVICE/" + id + "/SHARED_SCOPE"

	res := b.openPoll(token, "?timeout=30000")
	a.must(200, "POST", shared, `{"fw":"v2.0","target":7}`, auth)
	delivered(t, res, `{"fw":"v2.0","target":7}`)

	res = b.openPoll(token, "?timeout=30000")
	a.must(200, "POST", "/api/plugins/telemetry/DEVICE/"+id+"/SERVER_SCOPE", `{"server":1}`, auth)
	a.must(200, "DELETE", shared+"?keys=target", "", auth)
	delivered(t, res, `{"deleted":["target"]}`)

	res = b.openPoll(token, "?timeout=30000")
	a.must(200, "DELETE", "/api/device/"+id, "", auth)
	if msg := errorBody(t, <-res, 403); msg != "Device was deleted!" {
		t.Fatalf("deleted device on the other node: %q", msg)
	}
}
