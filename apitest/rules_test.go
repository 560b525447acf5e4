package apitest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/config"
)

// rule is a client-side RPC rule as the REST API answers it.
type rule struct {
	ID              string  `json:"id"`
	TenantID        string  `json:"tenantId"`
	Method          string  `json:"method"`
	Script          string  `json:"script"`
	DeviceProfileID *string `json:"deviceProfileId"`
	Version         int     `json:"version"`
}

// saveRule saves a rule and returns it.
func (n *testNode) saveRule(auth, method, script, profileID string) rule {
	n.t.Helper()
	body := map[string]any{"method": method, "script": script}
	if profileID != "" {
		body["deviceProfileId"] = profileID
	}
	b, _ := json.Marshal(body)
	var r rule
	n.must(200, "POST", "/api/rpc/client/rules", string(b), auth).JSON(n.t, &r)
	if r.ID == "" || r.Method != method || r.Script != script {
		n.t.Fatalf("saved rule: %+v", r)
	}
	return r
}

func (n *testNode) rules(auth string) []rule {
	n.t.Helper()
	var rs []rule
	n.must(200, "GET", "/api/rpc/client/rules", "", auth).JSON(n.t, &rs)
	return rs
}

// callRPC sends a client-side RPC; body is the whole request body.
func (n *testNode) callRPC(token, body string) response {
	n.t.Helper()
	return n.do("POST", "/api/v1/"+token+"/rpc", body)
}

// expectRPC wants the RPC to answer status and body. When the rule was saved on
// another node the change arrives over Redis: it is polled for a while.
func expectRPC(t *testing.T, rest, dev *testNode, token, body string, status int, want string) {
	t.Helper()
	var last response
	ok := func() bool {
		last = dev.callRPC(token, body)
		return last.Status == status && (want == "" && len(last.Body) == 0 || want != "" && len(last.Body) > 0 && compactJSON(t, last.Body) == want)
	}
	if rest == dev {
		if !ok() {
			t.Fatalf("RPC %s: %d %s, want %d %s", body, last.Status, last.Body, status, want)
		}
		return
	}
	eventually(t, 5*time.Second, "RPC "+body+" answering "+want, ok)
}

// rpcAsync sends a client-side RPC in the background.
func (n *testNode) rpcAsync(token, body string) <-chan response {
	return n.async("POST", "/api/v1/"+token+"/rpc", body)
}

// rulesTenantAdmin creates another tenant with an administrator and returns its header.
func rulesTenantAdmin(t *testing.T, n *testNode) string {
	t.Helper()
	sys := n.login("sysadmin@thingsboard.org", "sysadmin")
	var ten struct{ ID entityID }
	n.must(200, "POST", "/api/tenant", `{"title":"Rules other tenant"}`, sys).JSON(t, &ten)
	var u struct{ ID entityID }
	n.must(200, "POST", "/api/user?sendActivationMail=false",
		`{"email":"rules-other@example.com","authority":"TENANT_ADMIN","tenantId":{"entityType":"TENANT","id":"`+ten.ID.ID+`"}}`, sys).JSON(t, &u)
	link := string(n.must(200, "GET", "/api/user/"+u.ID.ID+"/activationLink", "", sys).Body)
	_, token, _ := strings.Cut(link, "activateToken=")
	n.must(200, "POST", "/api/noauth/activate", `{"activateToken":"`+token+`","password":"password1"}`)
	return n.login("rules-other@example.com", "password1")
}

// rulesSuite checks every client-side RPC outcome: rules are managed on rest,
// devices call dev (the same node, or another one of the deployment).
func rulesSuite(t *testing.T, rest, dev *testNode) {
	auth := rest.tenantAuth()
	token := rest.Token

	// The built-in getCurrentTime answers with no rule at all.
	var now struct{ Time int64 }
	r := dev.callRPC(token, `{"method":"getCurrentTime","params":{}}`)
	if r.Status != 200 {
		t.Fatalf("getCurrentTime: %d %s", r.Status, r.Body)
	}
	r.JSON(t, &now)
	if now.Time < time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() {
		t.Fatalf("getCurrentTime: %s", r.Body)
	}
	// No rule: 404 naming the method, at once.
	if msg := errorBody(t, dev.callRPC(token, `{"method":"getTemp"}`), 404); !strings.Contains(msg, `"getTemp"`) {
		t.Fatalf("unknown method: %q", msg)
	}
	// Bad bodies.
	for _, body := range []string{`{"params":{}}`, `{"method":""}`, `{"method":1}`, `not json`, ``, `[]`} {
		errorBody(t, dev.callRPC(token, body), 400)
	}
	errorBody(t, dev.callRPC("no-such-token", `{"method":"getCurrentTime"}`), 401)
	errorBody(t, dev.callRPC(token, `{"method":"m","params":"`+strings.Repeat("x", 70000)+`"}`), 413)

	// Saving validates: a syntax error, a blank method, a foreign or unknown profile.
	if msg := errorBody(t, rest.do("POST", "/api/rpc/client/rules", `{"method":"m","script":"return {"}`, auth), 400); !strings.Contains(msg, "SyntaxError") {
		t.Fatalf("syntax error: %q", msg)
	}
	errorBody(t, rest.do("POST", "/api/rpc/client/rules", `{"method":" ","script":"return 1"}`, auth), 400)
	errorBody(t, rest.do("POST", "/api/rpc/client/rules", `{"method":"m","script":"return 1","deviceProfileId":"0190f4f2-8a3c-7b8e-9d2a-3c4b5d6e7f80"}`, auth), 400)
	errorBody(t, rest.do("POST", "/api/rpc/client/rules", `{"method":"m","script":"}); (function () {"}`, auth), 400)

	// A tenant rule overrides the built-in; saving it again updates it in place.
	first := rest.saveRule(auth, "getCurrentTime", `return {time: 42}`, "")
	expectRPC(t, rest, dev, token, `{"method":"getCurrentTime"}`, 200, `{"time":42}`)
	second := rest.saveRule(auth, "getCurrentTime", `return {time: 43}`, "")
	if second.ID != first.ID || second.Version != 2 || second.DeviceProfileID != nil {
		t.Fatalf("update of a rule: %+v after %+v", second, first)
	}
	expectRPC(t, rest, dev, token, `{"method":"getCurrentTime"}`, 200, `{"time":43}`)

	// params and device are in scope.
	rest.saveRule(auth, "describe", `return {sum: params.a + params.b, name: device.name, type: device.type, id: device.id.length}`, "")
	expectRPC(t, rest, dev, token, `{"method":"describe","params":{"a":2,"b":3}}`, 200,
		`{"sum":5,"name":"Demo Device","type":"default","id":36}`)
	rest.saveRule(auth, "echo", `return params`, "")
	expectRPC(t, rest, dev, token, `{"method":"echo"}`, 200, `null`)
	expectRPC(t, rest, dev, token, `{"method":"echo","params":[1,"two",{"3":null}]}`, 200, `[1,"two",{"3":null}]`)
	// undefined: 200 with an empty body.
	rest.saveRule(auth, "nothing", `var x = 1`, "")
	expectRPC(t, rest, dev, token, `{"method":"nothing"}`, 200, "")
	// A script that throws.
	boom := rest.saveRule(auth, "boom", `throw new Error("no sensor")`, "")
	// Another node learns of a saved rule through the notifier, a moment later;
	// until then it answers 404 for the method.
	r = dev.callRPC(token, `{"method":"boom"}`)
	if rest != dev {
		eventually(t, 5*time.Second, "the rule boom on the device's node", func() bool {
			r = dev.callRPC(token, `{"method":"boom"}`)
			return r.Status != 404
		})
	}
	if msg := errorBody(t, r, 500); !strings.Contains(msg, boom.ID) || !strings.Contains(msg, `"boom"`) || !strings.Contains(msg, "no sensor") {
		t.Fatalf("thrown error: %q", msg)
	}

	// A profile's rule beats the tenant-wide rule of the same method.
	profileID := rest.createProfile(auth, "rules-profile", "DISABLED", "", "")
	var pd struct{ ID entityID }
	rest.must(200, "POST", "/api/device", `{"name":"rules-dev","deviceProfileId":{"entityType":"DEVICE_PROFILE","id":"`+profileID+`"}}`, auth).JSON(t, &pd)
	var cred struct{ CredentialsID string }
	rest.must(200, "GET", "/api/device/"+pd.ID.ID+"/credentials", "", auth).JSON(t, &cred)
	rest.saveRule(auth, "who", `return "tenant"`, "")
	byProfile := rest.saveRule(auth, "who", `return "profile " + device.type`, profileID)
	if byProfile.DeviceProfileID == nil || *byProfile.DeviceProfileID != profileID {
		t.Fatalf("profile rule: %+v", byProfile)
	}
	expectRPC(t, rest, dev, cred.CredentialsID, `{"method":"who"}`, 200, `"profile rules-profile"`)
	expectRPC(t, rest, dev, token, `{"method":"who"}`, 200, `"tenant"`)
	// The profile's device falls back to the tenant rule, then to the built-in.
	expectRPC(t, rest, dev, cred.CredentialsID, `{"method":"getCurrentTime"}`, 200, `{"time":43}`)

	// List and delete.
	rs := rest.rules(auth)
	methods := []string{}
	for _, r := range rs {
		methods = append(methods, r.Method)
	}
	if got := strings.Join(methods, ","); got != "boom,describe,echo,getCurrentTime,nothing,who,who" {
		t.Fatalf("rules: %s", got)
	}
	rest.must(200, "DELETE", "/api/rpc/client/rules/"+byProfile.ID, "", auth)
	errorBody(t, rest.do("DELETE", "/api/rpc/client/rules/"+byProfile.ID, "", auth), 404)
	expectRPC(t, rest, dev, cred.CredentialsID, `{"method":"who"}`, 200, `"tenant"`)
	rest.must(200, "DELETE", "/api/rpc/client/rules/"+second.ID, "", auth)
	r = dev.callRPC(token, `{"method":"getCurrentTime"}`)
	eventually(t, 5*time.Second, "built-in getCurrentTime back", func() bool {
		r = dev.callRPC(token, `{"method":"getCurrentTime"}`)
		return r.Status == 200 && !strings.Contains(string(r.Body), `"time":43`)
	})
	if len(rest.rules(auth)) != 5 {
		t.Fatalf("rules after two deletes: %+v", rest.rules(auth))
	}

	// Roles and tenants: a customer user is refused, another tenant sees none of
	// these rules, cannot delete them, and its own rules do not answer our devices.
	custAuth, _ := rest.demoCustomer()
	errorBody(t, rest.do("GET", "/api/rpc/client/rules", "", custAuth), 403)
	errorBody(t, rest.do("POST", "/api/rpc/client/rules", `{"method":"m","script":"return 1"}`, custAuth), 403)
	errorBody(t, rest.do("DELETE", "/api/rpc/client/rules/"+boom.ID, "", custAuth), 403)
	other := rulesTenantAdmin(t, rest)
	if rs := rest.rules(other); len(rs) != 0 {
		t.Fatalf("other tenant sees rules: %+v", rs)
	}
	errorBody(t, rest.do("DELETE", "/api/rpc/client/rules/"+boom.ID, "", other), 404)
	errorBody(t, rest.do("POST", "/api/rpc/client/rules", `{"method":"m","script":"return 1","deviceProfileId":"`+profileID+`"}`, other), 400)
	rest.saveRule(other, "otherOnly", `return 1`, "")
	if msg := errorBody(t, dev.callRPC(token, `{"method":"otherOnly"}`), 404); !strings.Contains(msg, "otherOnly") {
		t.Fatalf("other tenant's rule: %q", msg)
	}
	if len(rest.rules(auth)) != 5 {
		t.Fatal("the other tenant's rule is listed for ours")
	}
}

// runawaySuite: a script past the time limit and one past the memory limit are
// answered with an error while other requests on the same node succeed.
func runawaySuite(t *testing.T, n *testNode) {
	auth := n.tenantAuth()
	spin := n.saveRule(auth, "spin", `while (true) {}`, "")
	n.saveRule(auth, "bomb", `var s = 'x'.repeat(1e6), a = []; while (true) a.push(s + a.length)`, "")
	n.saveRule(auth, "bigString", `return 'x'.repeat(1e9)`, "")
	n.saveRule(auth, "double", `return params * 2`, "")

	loop := n.rpcAsync(n.Token, `{"method":"spin"}`)
	bomb := n.rpcAsync(n.Token, `{"method":"bomb"}`)
	for i := range 5 {
		expectRPC(t, n, n, n.Token, `{"method":"double","params":`+ruleItoa(i)+`}`, 200, ruleItoa(2*i))
		n.must(200, "POST", "/api/v1/"+n.Token+"/telemetry", `{"t":1}`)
	}
	if msg := errorBody(t, <-loop, 500); !strings.Contains(msg, spin.ID) || !strings.Contains(msg, "timeout after 2000 ms") {
		t.Fatalf("runaway loop: %q", msg)
	}
	if msg := errorBody(t, <-bomb, 500); !strings.Contains(msg, `"bomb"`) || !strings.Contains(msg, "memory limit") {
		t.Fatalf("memory bomb: %q", msg)
	}
	if msg := errorBody(t, n.callRPC(n.Token, `{"method":"bigString"}`), 500); !strings.Contains(msg, "memory limit of 16777216 bytes exceeded") {
		t.Fatalf("big string: %q", msg)
	}
	expectRPC(t, n, n, n.Token, `{"method":"double","params":21}`, 200, `42`)
}

func ruleItoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// scriptLimits gives scripts time enough that the memory bomb reaches its
// memory limit first even under the race detector.
func scriptLimits(c *config.Config) { c.Device.ScriptTimeout = 2000 }

// TestClientRPC: every client-side RPC outcome on the embedded default.
func TestClientRPC(t *testing.T) {
	n := startNode(t, scriptLimits)
	t.Run("rules", func(t *testing.T) { rulesSuite(t, n, n) })
	t.Run("runaway", func(t *testing.T) { runawaySuite(t, n) })
}

// TestClientRPCAcrossNodes: the same on two nodes over ClickHouse + Redis, rules
// managed on node A and devices calling node B.
func TestClientRPCAcrossNodes(t *testing.T) {
	d := newDeployment(t)
	a := d.node(t, scriptLimits)
	b := d.node(t, scriptLimits)
	b.Token = a.Token
	t.Run("rules", func(t *testing.T) { rulesSuite(t, a, b) })
	t.Run("runaway", func(t *testing.T) { runawaySuite(t, b) })
}
