package apitest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-iot/sluice/config"
)

// shortRPC lowers SLUICE_RPC_MIN_TIMEOUT so RPCs can expire within a test.
func shortRPC(c *config.Config) { c.Device.RPCMinTimeout = 100 }

// async sends a request in the background (long waits: REST RPC calls, polls)
// and delivers the answer; a transport error is status 0 with the error text.
func (n *testNode) async(method, path, body string, headers ...string) <-chan response {
	res := make(chan response, 1)
	go func() {
		req, err := http.NewRequest(method, n.URL+path, strings.NewReader(body))
		if err != nil {
			res <- response{Body: []byte(err.Error())}
			return
		}
		req.Header.Set("Content-Type", "application/json")
		for _, h := range headers {
			k, v, _ := strings.Cut(h, ":")
			req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
		}
		resp, err := pollClient.Do(req)
		if err != nil {
			res <- response{Body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			res <- response{Body: []byte(err.Error())}
			return
		}
		res <- response{Status: resp.StatusCode, Body: b, Header: resp.Header}
	}()
	return res
}

// rpcPoll starts the device's RPC poll GET /api/v1/{token}/rpc?timeout=ms.
func (n *testNode) rpcPoll(token string, timeoutMs int) <-chan response {
	return n.async("GET", fmt.Sprintf("/api/v1/%s/rpc?timeout=%d", token, timeoutMs), "")
}

// openRPCPoll starts an RPC poll and returns once the node holds it.
func (n *testNode) openRPCPoll(token string) <-chan response {
	n.t.Helper()
	before := n.node.Engine().OpenPolls()
	res := n.rpcPoll(token, 30000)
	n.waitPolls(before + 1)
	return res
}

type deviceRPC struct {
	ID     int             `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// gotRPC checks that a poll answered 200 application/json with an RPC and returns it.
func gotRPC(t *testing.T, res <-chan response) deviceRPC {
	t.Helper()
	r := <-res
	if r.Status != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("RPC poll: %d %q %s, want 200 application/json", r.Status, r.Header.Get("Content-Type"), r.Body)
	}
	var rpc deviceRPC
	r.JSON(t, &rpc)
	return rpc
}

// answered checks a REST RPC answer: status and exact body (compacted when JSON).
func answered(t *testing.T, res <-chan response, status int, body string) {
	t.Helper()
	r := <-res
	got := string(r.Body)
	if len(r.Body) > 0 && json.Valid(r.Body) {
		got = compactJSON(t, r.Body)
	}
	if r.Status != status || got != body {
		t.Fatalf("RPC call: %d %s, want %d %q", r.Status, r.Body, status, body)
	}
	if body != "" && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("RPC call: content type %q", r.Header.Get("Content-Type"))
	}
}

// rpcSuite runs every server-side RPC outcome with the REST calls on rest and
// the device's polls and replies on dev (the same node, or two nodes).
func rpcSuite(t *testing.T, rest, dev *testNode) {
	auth := rest.tenantAuth()
	long := `"params":{"pin":7,"value":1},"timeout":30000`
	short := `"params":{},"timeout":100`

	t.Run("one-way delivered", func(t *testing.T) {
		id, token := rest.createDevice(auth, "rpc-oneway")
		poll := dev.openRPCPoll(token)
		call := rest.async("POST", "/api/rpc/oneway/"+id, `{"method":"setGpio",`+long+`}`, auth)
		rpc := gotRPC(t, poll)
		if rpc.ID != 0 || rpc.Method != "setGpio" || compactJSON(t, rpc.Params) != `{"pin":7,"value":1}` {
			t.Fatalf("delivered %+v %s", rpc, rpc.Params)
		}
		answered(t, call, 200, "")
		// V1 the same; the RPC is queued before the device polls this time.
		call = rest.async("POST", "/api/plugins/rpc/oneway/"+id, `{"method":"reboot",`+long+`}`, auth)
		if rpc := gotRPC(t, dev.rpcPoll(token, 30000)); rpc.ID != 1 || rpc.Method != "reboot" {
			t.Fatalf("V1 delivered %+v", rpc)
		}
		answered(t, call, 200, "")
	})

	t.Run("two-way replies", func(t *testing.T) {
		id, token := rest.createDevice(auth, "rpc-twoway")
		f := func(path, reply string, status int, body string) {
			t.Helper()
			call := rest.async("POST", path+id, `{"method":"getState",`+long+`}`, auth)
			rpc := gotRPC(t, dev.rpcPoll(token, 30000))
			// A reply without a body is refused (ThingsBoard's required body) and
			// leaves the RPC waiting for a real one.
			errorBody(t, dev.do("POST", fmt.Sprintf("/api/v1/%s/rpc/%d", token, rpc.ID), ""), 400)
			dev.must(200, "POST", fmt.Sprintf("/api/v1/%s/rpc/%d", token, rpc.ID), reply)
			answered(t, call, status, body)
		}
		f("/api/rpc/twoway/", `{"state": "on", "n": [1, 2]}`, 200, `{"state":"on","n":[1,2]}`)
		f("/api/rpc/twoway/", `42`, 200, `42`)
		f("/api/rpc/twoway/", `not json`, 406, ``)
		f("/api/plugins/rpc/twoway/", `{"v1":true}`, 200, `{"v1":true}`)
	})

	t.Run("expiry", func(t *testing.T) {
		id, token := rest.createDevice(auth, "rpc-expiry")
		// Never polled: 504 (V1 409), two-way and one-way alike.
		calls := map[string]<-chan response{}
		for _, path := range []string{"/api/rpc/twoway/", "/api/rpc/oneway/", "/api/plugins/rpc/twoway/", "/api/plugins/rpc/oneway/"} {
			calls[path] = rest.async("POST", path+id, `{"method":"m",`+short+`}`, auth)
		}
		answered(t, calls["/api/rpc/twoway/"], 504, "")
		answered(t, calls["/api/rpc/oneway/"], 504, "")
		answered(t, calls["/api/plugins/rpc/twoway/"], 409, "")
		answered(t, calls["/api/plugins/rpc/oneway/"], 409, "")
		// An expired RPC is not delivered later.
		timedOut(t, dev.rpcPoll(token, 100))

		// Delivered and not answered: 504 (V1 408); a late reply is ignored (200).
		for path, status := range map[string]int{"/api/rpc/twoway/": 504, "/api/plugins/rpc/twoway/": 408} {
			call := rest.async("POST", path+id, `{"method":"m",`+short+`}`, auth)
			rpc := gotRPC(t, dev.rpcPoll(token, 30000))
			answered(t, call, status, "")
			dev.must(200, "POST", fmt.Sprintf("/api/v1/%s/rpc/%d", token, rpc.ID), `{"late":true}`)
		}
	})

	t.Run("persistent", func(t *testing.T) {
		id, token := rest.createDevice(auth, "rpc-persistent")
		send := func(path, body string) string {
			t.Helper()
			var out struct{ RpcID string }
			rest.must(200, "POST", path+id, body, auth).JSON(t, &out)
			if out.RpcID == "" {
				t.Fatalf("no rpcId from %s", path)
			}
			return out.RpcID
		}
		type rpcView struct {
			ID             entityID        `json:"id"`
			DeviceID       entityID        `json:"deviceId"`
			ExpirationTime int64           `json:"expirationTime"`
			Status         string          `json:"status"`
			Response       json.RawMessage `json:"response"`
			Request        struct {
				Oneway bool `json:"oneway"`
				Body   struct{ Method, Params string }
			} `json:"request"`
			AdditionalInfo json.RawMessage `json:"additionalInfo"`
		}
		get := func(on *testNode, rpcID string) rpcView {
			t.Helper()
			var v rpcView
			on.must(200, "GET", "/api/rpc/persistent/"+rpcID, "", auth).JSON(t, &v)
			return v
		}

		// Oldest first, ids increasing: three persistent RPCs, then the device polls.
		first := send("/api/rpc/twoway/", `{"method":"first",`+long+`,"persistent":true,"additionalInfo":{"note":"x"}}`)
		second := send("/api/rpc/oneway/", `{"method":"second",`+long+`,"persistent":true}`)
		third := send("/api/plugins/rpc/twoway/", `{"method":"third",`+long+`,"persistent":true}`)
		v := get(dev, first)
		if v.Status != "QUEUED" || v.ID.EntityType != "RPC" || v.ID.ID != first || v.DeviceID.ID != id ||
			v.Request.Body.Method != "first" || v.Request.Body.Params != `{"pin":7,"value":1}` || v.Request.Oneway ||
			compactJSON(t, v.AdditionalInfo) != `{"note":"x"}` || string(v.Response) != "null" {
			t.Fatalf("queued RPC: %+v", v)
		}
		var ids []int
		for _, want := range []string{"first", "second", "third"} {
			rpc := gotRPC(t, dev.rpcPoll(token, 30000))
			if rpc.Method != want {
				t.Fatalf("delivered %s, want %s", rpc.Method, want)
			}
			ids = append(ids, rpc.ID)
		}
		if ids[0] >= ids[1] || ids[1] >= ids[2] {
			t.Fatalf("ids not increasing: %v", ids)
		}
		if v := get(rest, first); v.Status != "DELIVERED" {
			t.Fatalf("first after delivery: %s", v.Status)
		}
		if v := get(rest, second); v.Status != "DELIVERED" { // for good, as ThingsBoard
			t.Fatalf("one-way after delivery: %s", v.Status)
		}
		dev.must(200, "POST", fmt.Sprintf("/api/v1/%s/rpc/%d", token, ids[0]), `{"result":"ok"}`)
		if v := get(rest, first); v.Status != "SUCCESSFUL" || compactJSON(t, v.Response) != `{"result":"ok"}` {
			t.Fatalf("first after reply: %s %s", v.Status, v.Response)
		}

		// A reply that is not JSON: SUCCESSFUL with {"error":"<reply>"}, as ThingsBoard.
		if v := get(rest, third); v.Status != "DELIVERED" {
			t.Fatalf("third after delivery: %s", v.Status)
		}
		dev.must(200, "POST", fmt.Sprintf("/api/v1/%s/rpc/%d", token, ids[2]), `not json`)
		if v := get(rest, third); v.Status != "SUCCESSFUL" || compactJSON(t, v.Response) != `{"error":"not json"}` {
			t.Fatalf("third after a reply that is not JSON: %s %s", v.Status, v.Response)
		}

		// Past expiry: EXPIRED, whether never delivered or delivered and not answered.
		expired := send("/api/rpc/twoway/", `{"method":"old","expirationTime":1,"persistent":true}`)
		if v := get(rest, expired); v.Status != "EXPIRED" || v.ExpirationTime != 1 {
			t.Fatalf("expired: %+v", v)
		}
		unanswered := send("/api/rpc/twoway/", `{"method":"late",`+short+`,"persistent":true}`)
		gotRPC(t, dev.rpcPoll(token, 30000))
		eventually(t, 10*time.Second, "EXPIRED", func() bool { return get(rest, unanswered).Status == "EXPIRED" })

		// The device listing: all of them, one status, paging.
		list := func(query string) (total int, methods []string) {
			t.Helper()
			var page struct {
				Data          []rpcView
				TotalElements int
				HasNext       bool
			}
			rest.must(200, "GET", "/api/rpc/persistent/device/"+id+"?pageSize=10&page=0"+query, "", auth).JSON(t, &page)
			for _, v := range page.Data {
				methods = append(methods, v.Request.Body.Method)
			}
			return page.TotalElements, methods
		}
		if total, methods := list(""); total != 5 || strings.Join(methods, ",") != "first,second,third,old,late" {
			t.Fatalf("all: %d %v", total, methods)
		}
		if total, methods := list("&rpcStatus=SUCCESSFUL"); total != 2 || strings.Join(methods, ",") != "first,third" {
			t.Fatalf("SUCCESSFUL: %d %v", total, methods)
		}
		if total, methods := list("&rpcStatus=EXPIRED"); total != 2 || strings.Join(methods, ",") != "old,late" {
			t.Fatalf("EXPIRED: %d %v", total, methods)
		}
		if total, methods := list("&sortProperty=response&sortOrder=ASC"); total != 5 || strings.Join(methods, ",") != "third,first,second,old,late" {
			t.Fatalf("by response: %d %v", total, methods) // {"error"…} < {"result"…}, then no response (NULL) in list order
		}
		if total, _ := list("&sortProperty=request&sortOrder=DESC"); total != 5 {
			t.Fatalf("by request: %d", total)
		}
		if total, _ := list("&textSearch=LAT"); total != 1 {
			t.Fatalf("textSearch: %d", total)
		}
		errorBody(t, rest.do("GET", "/api/rpc/persistent/device/"+id+"?pageSize=10&page=0&rpcStatus=DELETED", "", auth), 400)

		// Delete: tenant administrators only; then it is gone.
		customer := rest.login("customer@thingsboard.org", "customer")
		errorBody(t, rest.do("DELETE", "/api/rpc/persistent/"+expired, "", customer), 403)
		dev.must(200, "DELETE", "/api/rpc/persistent/"+expired, "", auth)
		errorBody(t, rest.do("GET", "/api/rpc/persistent/"+expired, "", auth), 404)
		if total, _ := list(""); total != 4 {
			t.Fatalf("after delete: %d", total)
		}
	})

	t.Run("errors and access", func(t *testing.T) {
		id, token := rest.createDevice(auth, "rpc-errors")
		// Device API: unknown token 401, bad id 400, stale id 200, oversized reply 413.
		errorBody(t, dev.do("GET", "/api/v1/NO_SUCH_TOKEN/rpc?timeout=100", ""), 401)
		errorBody(t, dev.do("POST", "/api/v1/NO_SUCH_TOKEN/rpc/0", `{}`), 401)
		errorBody(t, dev.do("GET", "/api/v1/"+token+"/rpc?timeout=soon", ""), 400)
		errorBody(t, dev.do("POST", "/api/v1/"+token+"/rpc/first", `{}`), 400)
		dev.must(200, "POST", "/api/v1/"+token+"/rpc/999", `{"stale":true}`)
		dev.must(200, "POST", "/api/v1/"+token+"/rpc/2147483647", `{"stale":true}`)
		errorBody(t, dev.do("POST", "/api/v1/"+token+"/rpc/2147483648", `{}`), 400) // past ThingsBoard's Integer
		errorBody(t, dev.do("POST", "/api/v1/"+token+"/rpc/0", `"`+strings.Repeat("x", 70000)+`"`), 413)
		if msg := errorBody(t, dev.do("POST", "/api/v1/"+token+"/rpc/0", ""), 400); msg != "Required request body is missing" {
			t.Fatalf("reply without a body: %q", msg)
		}

		// REST: bad bodies and ids 400, unknown device 404.
		for _, body := range []string{`{"method":`, `[]`, `{"params":{}}`, `{"method":"m","timeout":"soon"}`, `{"method":{}}`,
			`{"method":"m","persistent":"yes"}`, `{"method":"m","retries":1e10}`, `{"method":"m","expirationTime":1e19}`, `{"method":"m","timeout":true}`} {
			if msg := errorBody(t, rest.do("POST", "/api/rpc/twoway/"+id, body, auth), 400); !strings.Contains(msg, "Invalid request body") {
				t.Fatalf("body %s: %q", body, msg)
			}
		}
		// Numbers and booleans as strings, and numbers with a fraction, as
		// Jackson's asLong/asInt/asBoolean read them.
		var lenient struct {
			RpcID string
		}
		rest.must(200, "POST", "/api/rpc/oneway/"+id, `{"method":7,"persistent":"true","retries":"2","timeout":"5000.9","expirationTime":"0"}`, auth).JSON(t, &lenient)
		if r := rest.must(200, "GET", "/api/rpc/persistent/"+lenient.RpcID, "", auth); !strings.Contains(string(r.Body), `"method":"7"`) ||
			!strings.Contains(string(r.Body), `"retries":2`) {
			t.Fatalf("lenient RPC body: %s", r.Body)
		}
		rest.must(200, "DELETE", "/api/rpc/persistent/"+lenient.RpcID, "", auth)

		// requestUUID names the RPC; it must be a UUID and not name another RPC.
		chosen := "5f3c2a10-9b7e-4d21-8c64-0e1f2a3b4c5d"
		if r := rest.must(200, "POST", "/api/rpc/oneway/"+id, `{"method":"m","persistent":true,"requestUUID":"`+chosen+`"}`, auth); compactJSON(t, r.Body) != `{"rpcId":"`+chosen+`"}` {
			t.Fatalf("requestUUID: %s", r.Body)
		}
		for _, body := range []string{`{"method":"m","persistent":true,"requestUUID":"` + chosen + `"}`, `{"method":"m","requestUUID":"x"}`, `{"method":"m","requestUUID":7}`} {
			if msg := errorBody(t, rest.do("POST", "/api/rpc/twoway/"+id, body, auth), 400); !strings.Contains(msg, "Invalid request body") {
				t.Fatalf("body %s: %q", body, msg)
			}
		}
		rest.must(200, "DELETE", "/api/rpc/persistent/"+chosen, "", auth)
		errorBody(t, rest.do("POST", "/api/rpc/oneway/not-a-uuid", `{"method":"m"}`, auth), 400)
		errorBody(t, rest.do("GET", "/api/rpc/persistent/not-a-uuid", "", auth), 400)
		errorBody(t, rest.do("POST", "/api/rpc/oneway/"+id, `{"method":"m"}`), 401)
		unknown := "0190f4f2-8a3c-7b8e-9d2a-3c4b5d6e7f80"
		for _, r := range []response{rest.do("POST", "/api/rpc/oneway/"+unknown, `{"method":"m"}`, auth),
			rest.do("GET", "/api/rpc/persistent/device/"+unknown+"?pageSize=10&page=0", "", auth)} {
			if msg := errorBody(t, r, 404); msg != "Device with requested id wasn't found!" { // ThingsBoard's AccessValidator
				t.Fatalf("unknown device: %q", msg)
			}
		}
		errorBody(t, rest.do("GET", "/api/rpc/persistent/"+unknown, "", auth), 404)

		// Another tenant's admin, a customer user and the system administrator get
		// for the RPC paths exactly what GET /api/device/{id} gives them.
		var rpcID struct{ RpcID string }
		rest.must(200, "POST", "/api/rpc/oneway/"+id, `{"method":"m","persistent":true}`, auth).JSON(t, &rpcID)
		for _, who := range []string{rest.otherTenantAdmin(), rest.login("customer@thingsboard.org", "customer"),
			rest.login("sysadmin@thingsboard.org", "sysadmin")} {
			want := rest.do("GET", "/api/device/"+id, "", who)
			wantMsg := errorBody(t, want, want.Status)
			for _, r := range []response{
				rest.do("POST", "/api/rpc/oneway/"+id, `{"method":"m"}`, who),
				rest.do("POST", "/api/plugins/rpc/twoway/"+id, `{"method":"m","persistent":true}`, who),
				rest.do("GET", "/api/rpc/persistent/device/"+id+"?pageSize=10&page=0", "", who),
				rest.do("GET", "/api/rpc/persistent/"+rpcID.RpcID, "", who),
			} {
				if msg := errorBody(t, r, want.Status); msg != wantMsg {
					t.Fatalf("message %q, want %q", msg, wantMsg)
				}
			}
		}
		// A customer user reaches its customer's device.
		customer := rest.login("customer@thingsboard.org", "customer")
		custID := rest.node.Bootstrap.CustomerDeviceID.String()
		rest.must(200, "POST", "/api/rpc/oneway/"+custID, `{"method":"m","persistent":true}`, customer).JSON(t, &rpcID)
		rest.must(200, "GET", "/api/rpc/persistent/"+rpcID.RpcID, "", customer)
	})

	t.Run("credentials changed", func(t *testing.T) {
		// New credentials end the open poll at once with 408, as for the
		// attribute poll: an RPC queued later must not reach the old token.
		id, token := rest.createDevice(auth, "rpc-new-token")
		poll := dev.openRPCPoll(token)
		rest.must(200, "POST", "/api/device/credentials",
			`{"deviceId":{"entityType":"DEVICE","id":"`+id+`"},"credentialsType":"ACCESS_TOKEN","credentialsId":"NEW_`+token+`"}`, auth)
		timedOut(t, poll)
	})

	t.Run("device deleted", func(t *testing.T) {
		id, token := rest.createDevice(auth, "rpc-deleted")
		poll := dev.openRPCPoll(token)
		rest.must(200, "DELETE", "/api/device/"+id, "", auth)
		if msg := errorBody(t, <-poll, 403); msg != "Device was deleted!" {
			t.Fatalf("deleted device: %q", msg)
		}
	})
}

// otherTenantAdmin creates a second tenant with an administrator (as the system
// administrator) and returns the administrator's X-Authorization header.
func (n *testNode) otherTenantAdmin() string {
	n.t.Helper()
	sys := n.login("sysadmin@thingsboard.org", "sysadmin")
	var tenant struct{ ID entityID }
	n.must(200, "POST", "/api/tenant", `{"title":"RPC other tenant"}`, sys).JSON(n.t, &tenant)
	var user struct{ ID entityID }
	n.must(200, "POST", "/api/user?sendActivationMail=false",
		`{"email":"rpc-other@example.com","authority":"TENANT_ADMIN","tenantId":{"entityType":"TENANT","id":"`+tenant.ID.ID+`"}}`,
		sys).JSON(n.t, &user)
	link := string(n.must(200, "GET", "/api/user/"+user.ID.ID+"/activationLink", "", sys).Body)
	_, token, ok := strings.Cut(link, "activateToken=")
	if !ok {
		n.t.Fatalf("activation link %q", link)
	}
	var pair struct{ Token string }
	n.must(200, "POST", "/api/noauth/activate", `{"activateToken":"`+token+`","password":"password1"}`).JSON(n.t, &pair)
	return "X-Authorization: Bearer " + pair.Token
}

// TestServerRPC: every server-side RPC outcome on the embedded default.
func TestServerRPC(t *testing.T) {
	n := startNode(t, shortRPC)
	rpcSuite(t, n, n)
}

// TestServerRPCAcrossNodes: the same over ClickHouse + Redis with the device on
// node B and the REST calls on node A: RPCs, replies and deliveries cross over
// Redis.
func TestServerRPCAcrossNodes(t *testing.T) {
	d := newDeployment(t)
	a := d.node(t, shortRPC)
	b := d.node(t, shortRPC)
	rpcSuite(t, a, b)
}

// redisHeldConnections counts the Redis connections that are subscribed or
// blocked: what a long poll holding a connection of its own would add.
func redisHeldConnections(t *testing.T, addr string) int {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for line := range strings.SplitSeq(list, "\n") {
		for field := range strings.FieldsSeq(line) {
			if flags, ok := strings.CutPrefix(field, "flags="); ok && strings.ContainsAny(flags, "Pb") {
				held++
			}
		}
	}
	return held
}

// TestRPCPollsHoldNoRedisConnection: 200 RPC polls waiting on a production node
// add no subscribed or blocked Redis connection; an RPC queued on the other node
// still reaches one of them.
func TestRPCPollsHoldNoRedisConnection(t *testing.T) {
	const polls = 200
	d := newDeployment(t)
	// One device's polls: no per-device cap.
	manyPolls := func(c *config.Config) { shortRPC(c); c.HTTP.LongPollMaxPerDevice = 0 }
	a := d.node(t, manyPolls)
	b := d.node(t, manyPolls)
	auth := a.tenantAuth()
	id, token := a.createDevice(auth, "rpc-many")
	before := redisHeldConnections(t, d.redisAddr)
	results := make([]<-chan response, polls)
	for i := range results {
		results[i] = b.rpcPoll(token, 3000)
	}
	b.waitPolls(polls)
	if held := redisHeldConnections(t, d.redisAddr); held-before >= polls/2 {
		t.Fatalf("%d polls hold %d more subscribed or blocked Redis connections", polls, held-before)
	}
	a.must(200, "POST", "/api/rpc/oneway/"+id, `{"method":"wake","timeout":30000}`, auth)
	statuses := map[int]int{}
	for _, res := range results {
		statuses[(<-res).Status]++
	}
	if statuses[200] != 1 || statuses[408] != polls-1 {
		t.Fatalf("answers by status: %v, want one 200 and %d × 408", statuses, polls-1)
	}
}
