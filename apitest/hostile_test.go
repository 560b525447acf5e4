package apitest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
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
		if why := errorAnswer(n.do(method, path, body, headers...), status); why != "" {
			t.Errorf("%s %.60s %.40q: %s", method, path, body, why)
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
	n.must(200, "POST", tel, `{"a":1}`, "Content-Type: text/xml") // any type is JSON to the device API, as ThingsBoard's
	n.must(200, "POST", tel, `{"a":1}`, "Content-Type: application/octet-stream")
	f(400, "POST", tel, `<a>1</a>`, "Content-Type: text/xml")
	f(415, "POST", tel, `{"a":1}`, json, "Content-Encoding: br")
	f(400, "POST", tel, `not gzip at all`, json, "Content-Encoding: gzip")
	f(400, "POST", tel, `not zstd at all`, json, "Content-Encoding: zstd")
	f(400, "POST", tel, "\x0a\x03bad", "Content-Type: application/x-protobuf")
	f(401, "POST", "/api/v1/NO_SUCH_TOKEN/telemetry", `{"a":1}`)
	f(400, "POST", tel, `{"ts":1e400,"values":{"a":1}}`) // huge numbers where an integer is required
	f(400, "POST", tel, `{"ts":99999999999999999999999,"values":{"a":1}}`)
	f(400, "POST", tel, "\xef\xbb\xbf{\"a\":1}") // a byte-order mark is not JSON
	f(400, "POST", tel, "{\"a\":1}\x00")
	f(400, "POST", tel, `{"k":"`+strings.Repeat("v", 1<<20+1)+`"}`) // past SLUICE_MAX_VALUE_LENGTH
	f(400, "POST", tel, `{"a":[1,2,{"b":NaN}]}`)
	f(413, "POST", tel, gzipped(t, strings.Repeat(" ", 2*bodyLimit)), json, "Content-Encoding: gzip") // a bomb stops at the limit
	n.must(200, "POST", tel, string(gzipped(t, `{"a":1}`)), "Content-Type: text/xml", "Content-Encoding: gzip")
	f(415, "POST", tel, `{"a":1}`, json, "Content-Encoding: deflate")
	f(415, "POST", tel, gzipped(t, `{"a":1}`), json, "Content-Encoding: gzip, gzip")
	// Device attributes, RPC, claim, provision, firmware.
	f(400, "POST", attrs, `[{"a":1}]`)
	f(400, "POST", attrs, `{"a":`)
	f(400, "POST", attrs, deep)
	f(400, "POST", attrs, `{"a":{"b":NaN}}`)
	f(400, "POST", attrs, many.String())
	f(400, "POST", attrs, "")
	n.must(200, "POST", attrs, `{"a":1}`, "Content-Type: text/xml")
	f(400, "GET", "/api/v1/"+token+"/attributes/updates?timeout=soon", "")
	f(400, "GET", "/api/v1/"+token+"/rpc?timeout=-1", "")
	f(400, "GET", "/api/v1/"+token+"/rpc?timeout=1.5", "")
	f(400, "GET", "/api/v1/"+token+"/attributes/updates?timeout=99999999999999999999", "")
	f(400, "POST", "/api/v1/"+token+"/rpc/99999999999999999999", `{}`)
	f(400, "POST", "/api/v1/"+token+"/rpc/1e3", `{}`)
	f(413, "POST", "/api/v1/"+token+"/rpc/1", `{"a":"`+strings.Repeat("x", 64<<10)+`"}`) // ThingsBoard's 64 KiB for RPC replies
	f(400, "POST", "/api/v1/"+token+"/rpc/notanumber", `{}`)
	f(400, "POST", "/api/v1/"+token+"/rpc", `{"params":{}}`)
	f(400, "POST", "/api/v1/"+token+"/rpc", `{"method":`)
	f(400, "POST", "/api/v1/"+token+"/claim", `{"secretKey":`)
	f(400, "POST", "/api/v1/"+token+"/claim", `[1]`)
	f(400, "POST", "/api/v1/"+token+"/claim", `{"durationMs":"abc"}`)
	f(400, "POST", "/api/v1/provision", `{"provisionDeviceKey":`)
	f(400, "POST", "/api/v1/provision", ``)
	f(400, "POST", "/api/v1/provision", `[]`)
	f(400, "POST", "/api/v1/provision", `{"provisionDeviceKey":[1],"provisionDeviceSecret":2}`)
	f(400, "GET", "/api/v1/"+token+"/firmware", "")
	f(400, "GET", "/api/v1/"+token+"/firmware?title=x", "")
	f(400, "GET", "/api/v1/"+token+"/firmware?title=x&version=1&size=2147483648", "") // a Java int, as ThingsBoard binds it
	f(400, "GET", "/api/v1/"+token+"/firmware?title=x&version=1&chunk=abc", "")
	f(400, "GET", "/api/v1/"+token+"/software?title=x&version=1&size=99999999999999999999", "")
	// REST: login and bodies.
	f(401, "POST", "/api/auth/login", `{"username":`) // ThingsBoard's login filter: 401 for any unusable body
	f(401, "POST", "/api/auth/login", `[]`)
	f(401, "POST", "/api/auth/login", ``)
	f(401, "POST", "/api/auth/login", `<login/>`, "Content-Type: text/xml")
	f(401, "POST", "/api/auth/login", deep)
	f(401, "POST", "/api/auth/token", `{"refreshToken":`)
	f(401, "POST", "/api/auth/token", `{"refreshToken":"not.a.jwt"}`)
	f(401, "POST", "/api/auth/login", `{"username":"tenant@thingsboard.org","password":"wrong"}`)
	f(401, "GET", "/api/auth/user", "", "X-Authorization: Bearer not.a.jwt")
	f(431, "GET", "/api/auth/user", "", "X-Authorization: Bearer "+strings.Repeat("A", 10000))
	f(401, "GET", "/api/auth/user", "", "X-Authorization: ApiKey nope")
	f(401, "GET", "/api/auth/user", "", "Authorization: Basic dGVuYW50OnRlbmFudA==")
	f(401, "GET", "/api/auth/user", "", "X-Authorization: bearer "+strings.TrimPrefix(auth, "X-Authorization: Bearer ")) // the prefix is case-sensitive
	f(400, "POST", "/api/device", `{"name":`, auth)
	f(400, "POST", "/api/device", `{"name":["not","a","string"]}`, auth)
	f(400, "POST", "/api/device", `{"name":""}`, auth)
	f(400, "POST", "/api/device", ``, auth)
	f(400, "POST", "/api/device", `[]`, auth)
	f(400, "POST", "/api/device", `"sensor"`, auth)
	f(400, "POST", "/api/device", `{"name":"x","type":5}`, auth)
	f(400, "POST", "/api/device", `{"name":"x","id":{"entityType":"DEVICE","id":"not-a-uuid"}}`, auth)
	f(400, "POST", "/api/device", `{"name":"x","additionalInfo":NaN}`, auth)
	f(400, "POST", "/api/device", `{"name":"x"} garbage`, auth)
	f(400, "POST", "/api/device", deep, auth)
	f(400, "POST", "/api/device?accessToken="+strings.Repeat("t", 300), `{"name":"long-token"}`, auth)
	f(400, "POST", "/api/customer", `{"title":1}`, auth)
	f(400, "POST", "/api/user", `{"email":"not-an-email","authority":"TENANT_ADMIN"}`, auth)
	f(400, "POST", "/api/apiKey", `{"expirationTime":"soon"}`, auth)
	f(400, "POST", "/api/otaPackage", `{"title":"t","version":"v","type":"NOPE"}`, auth)
	f(400, "POST", "/api/device", "{\"name\":\"\xff\xfe\"}", auth)
	f(400, "POST", "/api/device", "{\"name\":\"a\x01\"}", auth)
	f(400, "POST", "/api/device", "{\"name\":\"x\",\"additionalInfo\":{\"note\":\"a\x01\"}}", auth)
	f(400, "POST", "/api/device", `{"name":"`+strings.Repeat("n", 1<<20)+`"}`, auth)
	f(400, "POST", "/api/device", `{"name":"`+strings.Repeat("ё", 256)+`"}`, auth) // 256 characters
	f(400, "POST", "/api/device", `{"name":"x","label":"`+strings.Repeat("l", 256)+`"}`, auth)
	f(400, "POST", "/api/customer", `{"title":"`+strings.Repeat("t", 256)+`"}`, auth)
	f(400, "POST", "/api/deviceProfile", `{"name":"p","provisionType":"NOPE"}`, auth)
	f(400, "POST", "/api/deviceProfile", `{"name":"p","transportType":"CARRIER_PIGEON"}`, auth)
	f(400, "POST", "/api/device", `{"name":"a\u0000b"}`, auth)
	f(400, "POST", "/api/customer", `{"title":"mail","email":"nope"}`, auth)
	f(400, "POST", "/api/user", `{"email":"`+strings.Repeat("u", 300)+`@example.com","authority":"TENANT_ADMIN"}`, auth)
	f(400, "POST", rest+"/timeseries/ANY/abc", `{"a":1}`, auth)
	f(400, "POST", "/api/deviceProfile", `{"name":"`+strings.Repeat("p", 256)+`"}`, auth)
	f(401, "POST", "/api/auth/login", "{\"username\":\"\xff\",\"password\":\"x\"}")
	f(400, "POST", "/apiAnalytics/publicApi/buildReport?jwt="+strings.TrimPrefix(auth, "X-Authorization: Bearer "), "{\"viewConfigId\":\"\xff\"}", "Content-Type: application/json")
	f(400, "POST", rest+"/timeseries/ANY", `{"a":`, auth)
	f(400, "POST", rest+"/timeseries/ANY", `{"a":null}`, auth)
	f(400, "POST", rest+"/timeseries/ANY", ``, auth)
	f(400, "POST", rest+"/timeseries/ANY", `{"a":NaN}`, auth)
	f(400, "POST", rest+"/timeseries/ANY", "{\"\xff\":1}", auth)
	f(400, "POST", rest+"/timeseries/ANY", megaKey, auth)
	f(415, "POST", rest+"/timeseries/ANY", `{"a":1}`, auth, "Content-Type: text/xml")
	f(400, "POST", rest+"/SHARED_SCOPE", `"s"`, auth)
	f(400, "POST", rest+"/SHARED_SCOPE", many.String(), auth)
	f(400, "POST", rest+"/CLIENT_SCOPE", `{"a":1}`, auth)
	f(400, "POST", rest+"/SHARED_SCOPE", `[]`, auth)
	f(400, "POST", rest+"/NO_SUCH_SCOPE", `{"a":1}`, auth)
	f(400, "POST", "/api/rpc/twoway/"+devID, `{"method":`, auth)
	f(400, "POST", "/api/rpc/twoway/"+devID, `{"params":{}}`, auth)
	f(400, "POST", "/api/rpc/oneway/"+devID, ``, auth)
	f(400, "POST", "/api/rpc/oneway/"+devID, `{"method":"m","timeout":1e400}`, auth)
	f(400, "POST", "/api/rpc/oneway/"+devID, `{"method":"m","timeout":"soon"}`, auth)
	f(400, "POST", "/api/rpc/oneway/"+devID, `{"method":"m","params":NaN}`, auth)
	f(400, "POST", "/api/rpc/oneway/"+devID, `{"method":"m","expirationTime":99999999999999999999}`, auth)
	f(400, "POST", "/api/rpc/twoway/not-a-uuid", `{"method":"m"}`, auth)
	// REST: paths and query parameters.
	f(400, "GET", "/api/device/not-a-uuid", "", auth)
	f(404, "GET", "/api/device/00000000-0000-0000-0000-000000000001", "", auth)
	f(400, "GET", "/api/tenant/devices?pageSize=-1&page=0", "", auth)
	f(400, "GET", "/api/tenant/devices?pageSize=abc&page=0", "", auth)
	f(400, "GET", "/api/tenant/devices?pageSize=10&page=-3", "", auth)
	f(400, "GET", "/api/tenant/devices?pageSize=99999999999999999999&page=0", "", auth)
	f(400, "GET", "/api/tenant/devices?pageSize=0&page=0", "", auth)
	f(400, "GET", "/api/tenant/devices?page=0", "", auth)
	f(400, "GET", "/api/tenant/devices?pageSize=10&page=0&sortProperty=name&sortOrder=SIDEWAYS", "", auth)
	f(400, "GET", "/api/tenant/devices?pageSize=10&page=0&sortProperty=nosuch", "", auth)
	f(400, "GET", "/api/rpc/persistent/device/"+devID+"?pageSize=10&page=0&rpcStatus=NOPE", "", auth)
	f(400, "GET", "/api/device/"+devID+"x", "", auth)
	f(400, "GET", "/api/device/not-a-uuid/credentials", "", auth)
	f(400, "GET", "/api/customer/not-a-uuid", "", auth)
	f(400, "GET", "/api/rpc/persistent/not-a-uuid", "", auth)
	f(400, "PUT", "/api/apiKey/not-a-uuid/enabled/true", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=abc&endTs=10", "", auth)
	// An end before the start by less than a step (an interval under a second counts as a
	// second) is one 1 ms bucket, as ThingsBoard reads it; by a step or more it is 400.
	n.must(200, "GET", rest+"/values/timeseries?keys=a&startTs=10&endTs=1&agg=AVG&interval=1", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=5000&endTs=1&agg=AVG&interval=1", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&agg=COUNT&interval=-5", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&limit=0", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&agg=MEDIAN&interval=1", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=99999999999999&agg=AVG&interval=1", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&limit=x", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&limit=99999999999999999999", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=1e3&endTs=10", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=99999999999999999999&endTs=10", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&agg=AVG&interval=abc", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&agg=avg&interval=5", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&orderBy=SIDEWAYS", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&agg=AVG&interval=1&intervalType=FORTNIGHT", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&agg=AVG&intervalType=week", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&agg=AVG&intervalType=WEEK&timeZone=Mars/Olympus", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&agg=AVG&intervalType=WEEK&timeZone=Local", "", auth)
	f(400, "GET", rest+"/values/timeseries?keys=a&startTs=0&endTs=10&agg=AVG&intervalType=WEEK&timeZone=%2B19:00", "", auth)
	f(400, "GET",
		rest+"/values/timeseries?keys=a&startTs=-9223372036854775808&endTs=9223372036854775807&agg=AVG&intervalType=QUARTER", "", auth)
	f(400, "GET", rest+"/values/timeseries/history?keys=a", "", auth)
	f(400, "GET",
		rest+"/values/timeseries?keys=a&startTs=-9223372036854775808&endTs=9223372036854775807&agg=AVG&interval=1", "", auth)
	f(400, "GET", rest+"/values/attributes/NO_SUCH_SCOPE", "", auth)
	f(400, "GET", rest+"/keys/attributes/NO_SUCH_SCOPE", "", auth)
	f(400, "DELETE", rest+"/NO_SUCH_SCOPE?keys=a", "", auth)
	f(400, "DELETE", rest+"/SERVER_SCOPE", "", auth)
	f(400, "DELETE", rest+"/timeseries/delete", "", auth)
	f(400, "GET", "/api/plugins/telemetry/DEVICE/not-a-uuid/values/timeseries?keys=a", "", auth)
	f(400, "GET", "/api/plugins/telemetry/DEVICE/urn:uuid:"+devID+"/values/timeseries?keys=a", "", auth)
	f(400, "GET", "/api/plugins/telemetry/DEVICE/"+strings.ReplaceAll(devID, "-", "")+"/values/timeseries?keys=a", "", auth)
	f(400, "GET", "/api/plugins/telemetry/SPACESHIP/"+devID+"/values/timeseries?keys=a", "", auth)
	f(404, "GET", "/api/no/such/path", "")
	f(405, "PUT", tel, `{"a":1}`)
	// Report API.
	f(415, "POST", "/apiAnalytics/publicApi/buildReport", `{}`, "Content-Type: text/plain", "jwt: "+strings.TrimPrefix(auth, "X-Authorization: Bearer "))
	f(400, "POST", "/apiAnalytics/publicApi/buildReport", `{"viewConfigId":`, json, "jwt: "+strings.TrimPrefix(auth, "X-Authorization: Bearer "))
	f(403, "POST", "/apiAnalytics/publicApi/buildReport", `{"viewConfigId":"x"}`, json, "jwt: not.a.jwt")

	// At the connection level: malformed request lines and headers, bad framing,
	// oversized headers and bodies. fasthttp rejects these before routing and
	// Server.ErrorHandler answers them with the JSON error body.
	raw := func(status int, req string) {
		t.Helper()
		rows++
		c, err := net.Dial("tcp", strings.TrimPrefix(n.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second)) // only keeps a broken server from hanging the test
		// Written while the answer is read: a node refusing an oversized header
		// answers and closes before the rest is sent, and a client that only reads
		// after its write has finished may see the reset instead of the answer.
		wrote := make(chan error, 1)
		go func() { _, err := c.Write([]byte(req)); wrote <- err }()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		werr := <-wrote
		if err != nil && status == 431 && errors.Is(err, syscall.ECONNRESET) && errors.Is(werr, syscall.ECONNRESET) {
			return // cut off mid-header: refused, though the 431 was lost to the reset
		}
		if err != nil {
			t.Errorf("%.50q: read: %v (write: %v)", req, err, werr)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if why := errorAnswer(response{Status: resp.StatusCode, Body: body, Header: resp.Header}, status); why != "" {
			t.Errorf("%.50q: %s", req, why)
		}
	}
	get := func(lines ...string) string {
		return "GET /healthz HTTP/1.1\r\nHost: x\r\n" + strings.Join(lines, "") + "\r\n"
	}
	post := func(lines ...string) string {
		return "POST " + tel + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + strings.Join(lines, "")
	}
	// A body past the limit is refused on its Content-Length, before it is read. (Only
	// the start is sent: the node closes the connection on the rest unread, and a
	// client still writing then sees a reset, not the 413.)
	raw(413, post(fmt.Sprintf("Content-Length: %d\r\n\r\n{", 3*bodyLimit)))
	raw(400, "NOT A REQUEST\r\n\r\n")
	raw(400, "G\x00T /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	raw(400, "GET healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	raw(431, get("X-Big: "+strings.Repeat("a", 1<<20)+"\r\n"))
	raw(431, "GET /healthz?"+strings.Repeat("a", 1<<20)+" HTTP/1.1\r\nHost: x\r\n\r\n")
	raw(431, get(strings.Repeat("X-H: v\r\n", 20000)))
	raw(400, get("NoColonHere\r\n"))
	raw(400, get("X-A: b\x00c\r\n"))
	raw(400, post("Content-Length: nope\r\n\r\n"))
	raw(400, post("Content-Length: -5\r\n\r\n"))
	raw(400, post("Content-Length: 99999999999999999999999\r\n\r\n"))
	raw(400, post("Content-Length: 7\r\nContent-Length: 8\r\n\r\n{\"a\":1}"))
	raw(400, post("Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"))
	raw(400, post("Transfer-Encoding: gzip\r\n\r\n"))

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
// connection after SLUICE_HTTP_HEADER_TIMEOUT (headers that never finish) or
// SLUICE_HTTP_READ_TIMEOUT (a body that never finishes), while the node serves others.
func TestStalledClientIsCut(t *testing.T) {
	n := startNode(t, func(c *config.Config) { c.HTTP.HeaderTimeout, c.HTTP.ReadTimeout = 300, 300 })
	for _, partial := range []string{
		"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ",
		"POST /api/v1/" + n.Token + "/telemetry HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\":",
		"\x16\x03\x01\x00\x05hello", // a TLS client on a plain-HTTP node: a request line that never ends
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

// errorAnswer says what is wrong with r as an error answer of status: "" when it
// has that status and the JSON error body {"status","message","errorCode","timestamp"}.
func errorAnswer(r response, status int) string {
	var e struct {
		Status    int
		Message   string
		ErrorCode *int
		Timestamp int64
	}
	switch {
	case r.Status != status:
		return fmt.Sprintf("status %d, want %d: %.200s", r.Status, status, r.Body)
	case !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json"):
		return fmt.Sprintf("content type %q", r.Header.Get("Content-Type"))
	case stdjson.Unmarshal(r.Body, &e) != nil || e.Status != status || e.Message == "" || e.ErrorCode == nil || e.Timestamp == 0:
		return fmt.Sprintf("not the JSON error body: %.200s", r.Body)
	}
	return ""
}

// gzipped is s compressed with gzip.
func gzipped(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
