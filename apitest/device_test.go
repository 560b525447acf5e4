package apitest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-iot/sluice/config"
)

// latestStrict reads the latest values of the device with native types.
func (n *testNode) latestStrict(auth, deviceID, keys string) string {
	n.t.Helper()
	r := n.must(200, "GET", "/api/plugins/telemetry/DEVICE/"+deviceID+"/values/timeseries?useStrictDataTypes=true&keys="+keys, "", auth)
	return string(r.Body)
}

func TestTelemetryFormsAreStored(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "forms")
	post := func(body string) {
		t.Helper()
		r := n.must(200, "POST", "/api/v1/"+token+"/telemetry", body)
		if len(r.Body) != 0 {
			t.Fatalf("write answered a body: %q", r.Body)
		}
	}
	post(`{"temperature":26,"humidity":87}`)
	post(`{"ts":1634712287000,"values":{"pressure":1013}}`)
	post(`[{"ts":1634712288000,"values":{"pressure":1014}},{"wind":3}]`)
	post(`{}`)
	post(`[]`)

	got := n.latestStrict(auth, id, "temperature,humidity,pressure,wind")
	for _, want := range []string{`"temperature":[{"ts":`, `"value":26}`, `"value":87}`, `"pressure":[{"ts":1634712288000,"value":1014}]`, `"value":3}`} {
		if !strings.Contains(got, want) {
			t.Fatalf("latest %s lacks %s", got, want)
		}
	}
	r := n.must(200, "GET", "/api/plugins/telemetry/DEVICE/"+id+"/values/timeseries?keys=pressure&startTs=0&endTs=9999999999999&orderBy=ASC", "", auth)
	if want := `{"pressure":[{"ts":1634712287000,"value":"1013"},{"ts":1634712288000,"value":"1014"}]}`; string(r.Body) != want {
		t.Fatalf("history %s, want %s", r.Body, want)
	}
}

// TestValueTyping drives the compat "Value typing" table through the whole stack:
// device JSON in, strict-typed REST JSON out.
func TestValueTyping(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "typing")
	ts := int64(1700000000000)
	f := func(in, want string) {
		t.Helper()
		ts++
		n.must(200, "POST", "/api/v1/"+token+"/telemetry", fmt.Sprintf(`{"ts":%d,"values":{"v":%s}}`, ts, in))
		got := n.latestStrict(auth, id, "v")
		exp := fmt.Sprintf(`{"v":[{"ts":%d,"value":%s}]}`, ts, want)
		if got != exp {
			t.Fatalf("value %s: got %s, want %s", in, got, exp)
		}
	}
	f(`true`, `true`)
	f(`false`, `false`)
	f(`73`, `73`)
	f(`-73`, `-73`)
	f(`42.0`, `42.0`)
	f(`4.2e1`, `42`)
	f(`1e2`, `100`)
	f(`25.5`, `25.5`)
	f(`1e-2`, `0.01`)
	f(`9223372036854775807`, `9223372036854775807`)
	f(`9223372036854775808`, `"9223372036854775808"`)
	f(`"42"`, `42`)
	f(`"4.5"`, `4.5`)
	f(`"abc"`, `"abc"`)
	f(`"1e5"`, `"1e5"`)
	f(`"héllo ✓"`, `"héllo ✓"`)
	f(`{"a": [1, 2, {"b": null}]}`, `{"a":[1,2,{"b":null}]}`)
	f(`[1,"x"]`, `[1,"x"]`)

	// null is dropped on the device path: the key keeps its previous value.
	before := n.latestStrict(auth, id, "v")
	n.must(200, "POST", "/api/v1/"+token+"/telemetry", `{"v":null}`)
	if after := n.latestStrict(auth, id, "v"); after != before {
		t.Fatalf("null changed the value: %s -> %s", before, after)
	}
}

func TestRetriesReplaceAndLatestIsNewest(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "retries")
	n.must(200, "POST", "/api/v1/"+token+"/telemetry", `{"ts":2000,"values":{"k":1}}`)
	n.must(200, "POST", "/api/v1/"+token+"/telemetry", `{"ts":2000,"values":{"k":2}}`) // retry with a new value
	n.must(200, "POST", "/api/v1/"+token+"/telemetry", `{"ts":1000,"values":{"k":0}}`) // backfill, older
	r := n.must(200, "GET", "/api/plugins/telemetry/DEVICE/"+id+"/values/timeseries?keys=k&startTs=0&endTs=5000", "", auth)
	if want := `{"k":[{"ts":2000,"value":"2"},{"ts":1000,"value":"0"}]}`; string(r.Body) != want {
		t.Fatalf("history %s, want %s", r.Body, want)
	}
	if got, want := n.latestStrict(auth, id, "k"), `{"k":[{"ts":2000,"value":2}]}`; got != want {
		t.Fatalf("latest %s, want %s", got, want)
	}
}

func TestDeviceAPIErrors(t *testing.T) {
	n := startNode(t, func(c *config.Config) {
		c.Limits.MaxBodySize = 4096
		c.Limits.MaxJSONDepth = 8
		c.Limits.MaxObjectKeys = 10
	})
	tok := n.Token
	f := func(method, path, body string, status int) {
		t.Helper()
		r := n.do(method, path, body)
		errorBody(t, r, status)
	}
	f("POST", "/api/v1/NO_SUCH_TOKEN/telemetry", `{"a":1}`, 401)
	f("POST", "/api/v1/NO_SUCH_TOKEN/attributes", `{"a":1}`, 401)
	f("GET", "/api/v1/NO_SUCH_TOKEN/attributes", ``, 401)
	f("POST", "/api/v1/"+tok+"/telemetry", `{"a":`, 400)
	f("POST", "/api/v1/"+tok+"/telemetry", `42`, 400)
	f("POST", "/api/v1/"+tok+"/telemetry", `[1,2]`, 400)
	f("POST", "/api/v1/"+tok+"/telemetry", `{"ts":"x","values":{"a":1}}`, 400)
	f("POST", "/api/v1/"+tok+"/telemetry", `{"a":1} trailing`, 400)
	f("POST", "/api/v1/"+tok+"/telemetry", `{"a":[[[[[[[[[[1]]]]]]]]]]}`, 400)
	f("POST", "/api/v1/"+tok+"/telemetry", `{"a":"\xff"}`, 400)
	f("POST", "/api/v1/"+tok+"/telemetry", ``, 400)
	keys := make([]string, 11)
	for i := range keys {
		keys[i] = fmt.Sprintf(`"k%d":1`, i)
	}
	f("POST", "/api/v1/"+tok+"/telemetry", "{"+strings.Join(keys, ",")+"}", 400)
	f("POST", "/api/v1/"+tok+"/attributes", `[{"a":1}]`, 400)
	f("POST", "/api/v1/"+tok+"/attributes", `"x"`, 400)
	f("POST", "/api/v1/"+tok+"/telemetry", `{"big":"`+strings.Repeat("x", 5000)+`"}`, 413)
	f("GET", "/api/v1/"+tok+"/nothing-here", ``, 404)
	f("GET", "/no/such/path", ``, 404)
	// The node is still healthy after all of that.
	n.must(200, "GET", "/healthz", "")
	n.must(200, "POST", "/api/v1/"+tok+"/telemetry", `{"ok":1}`)
}

func TestDeviceAttributes(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	id, token := n.createDevice(auth, "attrs")
	base := "/api/v1/" + token + "/attributes"
	get := func(query, want string) {
		t.Helper()
		r := n.must(200, "GET", base+query, "")
		if got := compactJSON(t, r.Body); got != want {
			t.Fatalf("GET attributes%s = %s, want %s", query, got, want)
		}
	}
	get("", `{}`)
	n.must(200, "POST", base, `{"fw":"v1.0","model":"X1","count":3,"ratio":0.5,"on":true,"cfg":{"a":[1]}}`)
	n.must(200, "POST", "/api/plugins/telemetry/DEVICE/"+id+"/attributes/SHARED_SCOPE", `{"target":23,"mode":"eco"}`, auth)
	n.must(200, "POST", "/api/plugins/telemetry/DEVICE/"+id+"/attributes/SERVER_SCOPE", `{"secret":"server only"}`, auth)

	get("", `{"client":{"cfg":{"a":[1]},"count":3,"fw":"v1.0","model":"X1","on":true,"ratio":0.5},"shared":{"mode":"eco","target":23}}`)
	get("?clientKeys=fw,count", `{"client":{"count":3,"fw":"v1.0"}}`)
	get("?clientKeys=fw&clientKeys=on", `{"client":{"fw":"v1.0","on":true}}`)
	get("?sharedKeys=target", `{"shared":{"target":23}}`)
	get("?clientKeys=fw&sharedKeys=mode", `{"client":{"fw":"v1.0"},"shared":{"mode":"eco"}}`)
	get("?clientKeys=missing&sharedKeys=mode", `{"shared":{"mode":"eco"}}`)
	get("?clientKeys=missing", `{}`)
	get("?clientKeys=&sharedKeys=", `{"client":{"cfg":{"a":[1]},"count":3,"fw":"v1.0","model":"X1","on":true,"ratio":0.5},"shared":{"mode":"eco","target":23}}`)
	get("?sharedKeys=target&whatever=1", `{"shared":{"target":23}}`)
	get("?sharedKeys=secret", `{}`)
	// Keys are read as written: not trimmed (ThingsBoard splits on commas only).
	n.must(200, "POST", base, `{" sp ":1,"a,b":2}`)
	get("?clientKeys=%20sp%20", `{"client":{" sp ":1}}`)
	get("?clientKeys=sp", `{}`)
	rest := "/api/plugins/telemetry/DEVICE/" + id
	if r := n.must(200, "GET", rest+"/values/attributes/CLIENT_SCOPE?keys=%20sp%20", "", auth); !strings.Contains(string(r.Body), `"key":" sp "`) {
		t.Fatalf("REST read of a key with spaces: %s", r.Body)
	}
	// A repeated key parameter is one key whole, and wins over keys.
	if r := n.must(200, "GET", rest+"/values/attributes/CLIENT_SCOPE?key=a,b&keys=fw", "", auth); !strings.Contains(string(r.Body), `"key":"a,b"`) || strings.Contains(string(r.Body), `"fw"`) {
		t.Fatalf("REST read by key: %s", r.Body)
	}
	n.must(200, "DELETE", rest+"/CLIENT_SCOPE?keys=%20sp%20", "", auth)
	n.must(200, "DELETE", rest+"/CLIENT_SCOPE?key=a,b", "", auth)
	get("?clientKeys=%20sp%20&clientKeys=a,b", `{}`)

	// A client attribute update replaces the value.
	n.must(200, "POST", base, `{"fw":"v1.1"}`)
	get("?clientKeys=fw", `{"client":{"fw":"v1.1"}}`)

	// Strings come back as JSON, whatever they hold: control characters escaped
	// (a log line with ANSI colours), DEL and the rest as sent.
	n.must(200, "POST", base, `{"log":"\u001b[31mERR\u0000","vt":"x\u000by\u007f","q":"\"\\"}`)
	r := n.must(200, "GET", base+"?clientKeys=log,vt,q", "")
	var back struct{ Client map[string]string }
	if err := json.Unmarshal(r.Body, &back); err != nil {
		t.Fatalf("GET attributes: %s is not JSON: %v", r.Body, err)
	}
	if c := back.Client; c["log"] != "\x1b[31mERR\x00" || c["vt"] != "x\vy\x7f" || c["q"] != `"\` {
		t.Fatalf("GET attributes: %q", c)
	}
}

func TestHealthz(t *testing.T) {
	n := startNode(t, nil)
	n.must(200, "GET", "/healthz", "")
}

// TestDeviceDeleteRacingTokenChange: a device deleted while its token is
// changed leaves no credentials behind; the token is free for the next device.
func TestDeviceDeleteRacingTokenChange(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	for i := range 60 {
		id, _ := n.createDevice(auth, fmt.Sprintf("racer %d", i))
		token := fmt.Sprintf("RACE_TOKEN_%d", i)
		creds := `{"deviceId":{"entityType":"DEVICE","id":"` + id + `"},"credentialsType":"ACCESS_TOKEN","credentialsId":"` + token + `"}`
		done := make(chan response, 1)
		go func() { done <- n.do("POST", "/api/device/credentials", creds, auth) }()
		n.must(200, "DELETE", "/api/device/"+id, "", auth)
		if r := <-done; r.Status != 200 && r.Status != 404 {
			t.Fatalf("round %d: token change: %d %s", i, r.Status, r.Body)
		}
		var dev struct{ ID entityID }
		n.must(200, "POST", "/api/device?accessToken="+token, fmt.Sprintf(`{"name":"heir %d"}`, i), auth).JSON(t, &dev)
		n.must(200, "POST", "/api/v1/"+token+"/telemetry", `{"ok":1}`)
	}
}

// TestDeviceVersionConflictHTTP: a stale version is 409 with ThingsBoard's
// message and error code 35.
func TestDeviceVersionConflictHTTP(t *testing.T) {
	n := startNode(t, nil)
	auth := n.tenantAuth()
	var dev map[string]any
	n.must(200, "POST", "/api/device", `{"name":"versioned"}`, auth).JSON(t, &dev)
	dev["label"] = "first"
	b, _ := json.Marshal(dev)
	n.must(200, "POST", "/api/device", string(b), auth)
	dev["label"] = "second" // still the version before "first"
	b, _ = json.Marshal(dev)
	r := n.do("POST", "/api/device", string(b), auth)
	if msg := errorBody(t, r, 409); msg != "Device was already changed by someone else" || !strings.Contains(string(r.Body), `"errorCode":35`) {
		t.Fatalf("stale version: %s", r.Body)
	}
	delete(dev, "version")
	b, _ = json.Marshal(dev)
	n.must(200, "POST", "/api/device", string(b), auth)
}
