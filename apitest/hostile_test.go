package apitest

import (
	"bufio"
	stdjson "encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/config"
)

// TestHostileRequests sends malformed requests of every kind to one node: each
// gets its 4xx with the JSON error body, and the node stays healthy.
func TestHostileRequests(t *testing.T) {
	const bodyLimit = 2 << 20
	n := startNode(t, func(c *config.Config) { c.Limits.MaxBodySize = bodyLimit })
	auth := n.tenantAuth()
	devID, token := n.createDevice(auth, "hostile")
	tel := "/api/v1/" + token + "/telemetry"
	attrs := "/api/v1/" + token + "/attributes"
	rest := "/api/plugins/telemetry/DEVICE/" + devID
	json := "Content-Type: application/json"

	deep := strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100)
	deepArr := `{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`
	var many strings.Builder
	many.WriteString("{")
	for i := range 100000 {
		if i > 0 {
			many.WriteString(",")
		}
		fmt.Fprintf(&many, `"k%d":1`, i)
	}
	many.WriteString("}")
	megaKey := `{"` + strings.Repeat("k", 1<<19) + `":1}`

	rows := 0
	f := func(status int, method, path, body string, headers ...string) {
		t.Helper()
		rows++
		r := n.do(method, path, body, headers...)
		var e struct {
			Status    int
			Message   string
			ErrorCode *int
			Timestamp int64
		}
		if r.Status != status {
			t.Errorf("%s %.60s %.40q: status %d, want %d: %.200s", method, path, body, r.Status, status, r.Body)
		} else if err := stdjson.Unmarshal(r.Body, &e); err != nil || e.Status != status || e.Message == "" || e.ErrorCode == nil || e.Timestamp == 0 {
			t.Errorf("%s %.60s %.40q: not a JSON error body: %.200s", method, path, body, r.Body)
		}
	}
	// Device telemetry: bad JSON, wrong shapes, numbers, nesting, sizes, encodings.
	f(400, "POST", tel, `{"a":`)
	f(400, "POST", tel, `{"a":1}}`)
	f(400, "POST", tel, `{"a":1} trailing`)
	f(400, "POST", tel, `{a:1}`)
	f(400, "POST", tel, `{'a':1}`)
	f(400, "POST", tel, `"just a string"`)
	f(400, "POST", tel, `42`)
	f(400, "POST", tel, `true`)
	f(400, "POST", tel, `[1,2,3]`)
	f(400, "POST", tel, `{"ts":"yesterday","values":{"a":1}}`)
	f(400, "POST", tel, `{"ts":1,"values":[1]}`)
	f(400, "POST", tel, `{"a":NaN}`)
	f(400, "POST", tel, `{"a":Infinity}`)
	f(400, "POST", tel, `{"a":-Infinity}`)
	f(400, "POST", tel, `{"a":01}`)
	f(400, "POST", tel, `{"a":1.}`)
	f(400, "POST", tel, `{"a":-}`)
	f(400, "POST", tel, `{"a":1,"a":}`)
	f(400, "POST", tel, `{"a":"\x01"}`)
	f(400, "POST", tel, "{\"a\":\"\xff\xfe\"}")
	f(400, "POST", tel, "{\"\xc3\x28\":1}")
	f(400, "POST", tel, `{"":1}`)
	f(400, "POST", tel, deep)
	f(400, "POST", tel, deepArr)
	f(400, "POST", tel, many.String())
	f(400, "POST", tel, megaKey)
	f(400, "POST", tel, "")
	f(400, "POST", tel, "   ")
	f(400, "POST", tel, `{"ts":1,"values":{"a":1}`)
	f(415, "POST", tel, `{"a":1}`, "Content-Type: text/xml")
	f(415, "POST", tel, `{"a":1}`, "Content-Type: application/octet-stream")
	f(415, "POST", tel, `{"a":1}`, json, "Content-Encoding: br")
	f(400, "POST", tel, `not gzip at all`, json, "Content-Encoding: gzip")
	f(400, "POST", tel, `not zstd at all`, json, "Content-Encoding: zstd")
	f(400, "POST", tel, "\x0a\x03bad", "Content-Type: application/x-protobuf")
	f(401, "POST", "/api/v1/NO_SUCH_TOKEN/telemetry", `{"a":1}`)
	// Device attributes, RPC, claim, provision, firmware.
	f(400, "POST", attrs, `[{"a":1}]`)
	f(400, "POST", attrs, `{"a":`)
	f(400, "POST", attrs, deep)
	f(400, "GET", "/api/v1/"+token+"/attributes/updates?timeout=soon", "")
	f(400, "GET", "/api/v1/"+token+"/rpc?timeout=-1", "")
	f(400, "POST", "/api/v1/"+token+"/rpc/notanumber", `{}`)
	f(400, "POST", "/api/v1/"+token+"/rpc", `{"params":{}}`)
	f(400, "POST", "/api/v1/"+token+"/rpc", `{"method":`)
	f(400, "POST", "/api/v1/"+token+"/claim", `{"secretKey":`)
	f(400, "POST", "/api/v1/"+token+"/claim", `[1]`)
	f(400, "POST", "/api/v1/provision", `{"provisionDeviceKey":`)
	f(400, "GET", "/api/v1/"+token+"/firmware", "")
	// REST: login and bodies.
	f(401, "POST", "/api/auth/login", `{"username":`) // ThingsBoard's login filter: 401 for any unusable body
	f(401, "POST", "/api/auth/login", `[]`)
	f(401, "POST", "/api/auth/login", `{"username":"tenant@thingsboard.org","password":"wrong"}`)
	f(401, "GET", "/api/auth/user", "", "X-Authorization: Bearer not.a.jwt")
	f(431, "GET", "/api/auth/user", "", "X-Authorization: Bearer "+strings.Repeat("A", 10000))
	f(401, "GET", "/api/auth/user", "", "X-Authorization: ApiKey nope")
	f(400, "POST", "/api/device", `{"name":`, auth)
	f(400, "POST", "/api/device", `{"name":["not","a","string"]}`, auth)
	f(400, "POST", "/api/device", `{"name":""}`, auth)
	f(400, "POST", rest+"/timeseries/ANY", `{"a":`, auth)
	f(400, "POST", rest+"/timeseries/ANY", `{"a":null}`, auth)
	f(400, "POST", rest+"/SHARED_SCOPE", `[]`, auth)
	f(400, "POST", rest+"/NO_SUCH_SCOPE", `{"a":1}`, auth)
	f(400, "POST", "/api/rpc/twoway/"+devID, `{"method":`, auth)
	f(400, "POST", "/api/rpc/twoway/"+devID, `{"params":{}}`, auth)
	// REST: paths and query parameters.
	f(400, "GET", "/api/device/not-a-uuid", "", auth)
	f(404, "GET", "/api/device/00000000-0000-0000-0000-000000000001", "", auth)
	f(400, "GET", "/api/tenant/devices?pageSize=-1&page=0", "", auth)
	f(400, "GET", "/api/tenant/devices?pageSize=abc&page=0", "", auth)
	f(400, "GET", "/api/tenant/devices?pageSize=10&page=-3", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=abc&endTs=10", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=10&endTs=1", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&agg=MEDIAN&interval=1", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=99999999999999&agg=AVG&interval=1", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&limit=x", "", auth)
	f(400, "GET", "/api/plugins/telemetry/DEVICE/not-a-uuid/values/timeseries?keys=a", "", auth)
	f(400, "GET", "/api/plugins/telemetry/SPACESHIP/"+devID+"/values/timeseries?keys=a", "", auth)
	f(404, "GET", "/api/no/such/path", "")
	f(405, "PUT", tel, `{"a":1}`)
	// Report API.
	f(415, "POST", "/apiAnalytics/publicApi/buildReport", `{}`, "Content-Type: text/plain", "jwt: "+strings.TrimPrefix(auth, "X-Authorization: Bearer "))
	f(400, "POST", "/apiAnalytics/publicApi/buildReport", `{"viewConfigId":`, json, "jwt: "+strings.TrimPrefix(auth, "X-Authorization: Bearer "))
	f(403, "POST", "/apiAnalytics/publicApi/buildReport", `{"viewConfigId":"x"}`, json, "jwt: not.a.jwt")

	// At the connection level: a malformed request line, a header that never
	// ends, a megabyte header line.
	raw := func(req string) string {
		t.Helper()
		c, err := net.Dial("tcp", strings.TrimPrefix(n.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write([]byte(req)); err != nil {
			return "write: " + err.Error()
		}
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "read: " + err.Error()
		}
		r.Body.Close()
		return r.Status
	}
	// A declared body past the limit is refused before it is read.
	if got := raw(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", tel, 3*bodyLimit)); !strings.HasPrefix(got, "413") {
		t.Errorf("oversized body: %s, want 413", got)
	}
	for _, req := range []string{
		"NOT A REQUEST\r\n\r\n",
		"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1<<20) + "\r\n\r\n",
		"POST " + tel + " HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
	} {
		if got := raw(req); !strings.HasPrefix(got, "4") && !strings.HasPrefix(got, "read:") && !strings.HasPrefix(got, "write:") {
			t.Errorf("%.40q: %s, want a 4xx or a closed connection", req, got)
		}
	}

	if rows < 60 {
		t.Fatalf("%d malformed requests, want at least 60", rows)
	}

	// Still healthy: health, a normal write and read.
	n.must(200, "GET", "/healthz", "")
	n.must(200, "POST", tel, `{"after":1}`)
	if got := n.latestStrict(auth, devID, "after"); !strings.Contains(got, `"after"`) {
		t.Fatalf("latest after the table: %s", got)
	}
}

// TestStalledClientIsCut: a client that sends half a request and stops loses its
// connection after SLUICE_HTTP_READ_TIMEOUT, while the node serves others.
func TestStalledClientIsCut(t *testing.T) {
	n := startNode(t, func(c *config.Config) { c.HTTP.ReadTimeout = 300 })
	for _, partial := range []string{
		"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ",
		"POST /api/v1/" + n.Token + "/telemetry HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\":",
	} {
		c, err := net.Dial("tcp", strings.TrimPrefix(n.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(partial)); err != nil {
			t.Fatal(err)
		}
		n.must(200, "GET", "/healthz", "") // others are served meanwhile
		// The server closes the connection (perhaps after a 408); a generous
		// deadline only keeps a broken server from hanging the test.
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 4096)
		for {
			_, err := c.Read(buf)
			if err == nil {
				continue
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("%.30q: connection still open after 30 s", partial)
			}
			break
		}
		c.Close()
	}
	// A long poll's wait is not reading: it outlives the read timeout.
	timedOut(t, n.poll(n.Token, "?timeout=1500"))
}
