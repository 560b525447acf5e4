package httpapi

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHeadAndAllow: HEAD is answered wherever GET is, with GET's status and
// headers and no body; a 405 says in Allow which methods the path takes.
func TestHeadAndAllow(t *testing.T) {
	n := startTestNode(t)
	send := func(method, path string) (*http.Response, []byte) {
		t.Helper()
		return n.exchange(method, path, "", []byte(`{"a":1}`), "Content-Type: application/json")
	}

	get, getBody := send("GET", "/healthz")
	head, headBody := send("HEAD", "/healthz")
	if head.StatusCode != 200 || len(headBody) != 0 || head.ContentLength != int64(len(getBody)) ||
		head.Header.Get("Content-Type") != get.Header.Get("Content-Type") {
		t.Fatalf("HEAD /healthz: %d, %d body bytes, Content-Length %d (GET: %d bytes)", head.StatusCode, len(headBody), head.ContentLength, len(getBody))
	}
	if head, _ := send("HEAD", "/api/auth/user"); head.StatusCode != 401 {
		t.Fatalf("HEAD /api/auth/user without a token: %d, want GET's 401", head.StatusCode)
	}
	if head, _ := send("HEAD", "/api/v1/"+n.Demo.DemoDeviceToken+"/attributes"); head.StatusCode != 200 {
		t.Fatalf("HEAD of a device's attributes: %d", head.StatusCode)
	}

	// Not on the RPC poll, whose GET delivers the RPC: a HEAD would lose it.
	tok, dev := n.Demo.DemoDeviceToken, n.Demo.DemoDeviceID.String()
	if status, body := n.send("POST", "/api/rpc/oneway/"+dev, n.tenant(), []byte(`{"method":"kept","persistent":true}`),
		"Content-Type: application/json"); status != 200 {
		t.Fatalf("persistent RPC: %d %s", status, body)
	}
	if head, _ := send("HEAD", "/api/v1/"+tok+"/rpc"); head.StatusCode != 405 {
		t.Fatalf("HEAD of the RPC poll: %d, want 405", head.StatusCode)
	}
	if status, body := n.send("GET", "/api/v1/"+tok+"/rpc?timeout=1000", "", nil); status != 200 || !strings.Contains(string(body), "kept") {
		t.Fatalf("the RPC after a HEAD: %d %s", status, body)
	}
	if resp, body := send("HEAD", "/api/v1/"+tok+"/telemetry"); resp.StatusCode != 405 || len(body) != 0 {
		t.Fatalf("HEAD of a POST route: %d", resp.StatusCode)
	}
	if _, body := n.exchange("PATCH", "/api/v1/"+tok+"/telemetry", "", nil); !strings.Contains(string(body), "Request method 'PATCH'") {
		t.Fatalf("405 message: %s", body)
	}

	resp, body := send("PUT", "/api/v1/"+n.Demo.DemoDeviceToken+"/telemetry")
	if resp.StatusCode != 405 || !strings.Contains(resp.Header.Get("Allow"), "POST") || !strings.Contains(string(body), `"status":405`) {
		t.Fatalf("PUT telemetry: %d, Allow %q, %s", resp.StatusCode, resp.Header.Get("Allow"), body)
	}
}

// TestRESTContentType: a REST body labelled as anything but JSON is a 415 with
// the JSON error body, as Spring answers; an unlabelled one is taken as JSON, and
// a device's provisioning body is JSON whatever curl labels it.
func TestRESTContentType(t *testing.T) {
	n := startTestNode(t)
	auth := n.tenant()
	for ct, want := range map[string]int{
		"application/xml": 415, "text/plain": 415, "application/x-www-form-urlencoded": 415,
		"": 200, "application/json": 200, "Application/JSON; charset=UTF-8": 200, "application/vnd.api+json": 200,
	} {
		var headers []string
		if ct != "" {
			headers = append(headers, "Content-Type: "+ct)
		}
		status, body := n.send("POST", "/api/customer", auth, []byte(`{"title":"c-`+strings.NewReplacer("/", "-", " ", "", ";", "", "=", "").Replace(ct)+`"}`), headers...)
		if status != want || (want == 415 && !strings.Contains(string(body), `"status":415`)) {
			t.Errorf("Content-Type %q: %d %s, want %d", ct, status, body, want)
		}
	}
	status, body := n.send("POST", "/api/v1/provision", "", []byte(`{"deviceName":"x","provisionDeviceKey":"k","provisionDeviceSecret":"s"}`),
		"Content-Type: application/x-www-form-urlencoded")
	if status != 200 {
		t.Fatalf("provision labelled as a form: %d %s", status, body)
	}
}

// TestHangup: a device that closes its connection while its RPC poll waits
// frees the poll at the next probe, and its poll never takes an RPC it could not
// hand over: the device's next poll gets it. A REST caller that hangs up on a
// two-way call ends it, and its RPC is dropped.
func TestHangup(t *testing.T) {
	defer func(d time.Duration) { hangupProbe = d }(hangupProbe)
	hangupProbe = 20 * time.Millisecond
	n := startTestNode(t)
	tok, dev := n.Demo.DemoDeviceToken, n.Demo.DemoDeviceID.String()
	open := func(req string) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", strings.TrimPrefix(n.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	waitPolls := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for n.Eng.OpenPolls() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d open polls, want %d", n.Eng.OpenPolls(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	c := open("GET /api/v1/" + tok + "/rpc?timeout=60000 HTTP/1.1\r\nHost: x\r\n\r\n")
	waitPolls(1)
	c.Close()
	waitPolls(0) // freed at the next probe, not in 60 s

	c = open("GET /api/v1/" + tok + "/rpc?timeout=60000 HTTP/1.1\r\nHost: x\r\n\r\n")
	waitPolls(1)
	c.Close()
	if status, body := n.send("POST", "/api/rpc/oneway/"+dev, n.tenant(), []byte(`{"method":"kept","persistent":true}`),
		"Content-Type: application/json"); status != 200 {
		t.Fatalf("persistent RPC: %d %s", status, body)
	}
	if status, body := n.send("GET", "/api/v1/"+tok+"/rpc?timeout=1000", "", nil); status != 200 || !strings.Contains(string(body), "kept") {
		t.Fatalf("the RPC after a poll that hung up: %d %s", status, body)
	}

	body := `{"method":"asked","params":{},"timeout":60000}`
	c = open("POST /api/rpc/twoway/" + dev + " HTTP/1.1\r\nHost: x\r\nX-Authorization: " + n.tenant() +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	time.Sleep(100 * time.Millisecond) // queued
	c.Close()
	time.Sleep(200 * time.Millisecond) // the call ends at the next probe and drops its RPC
	if status, body := n.send("GET", "/api/v1/"+tok+"/rpc?timeout=100", "", nil); status != 408 {
		t.Fatalf("the RPC of a caller that hung up: %d %s, want 408 (dropped)", status, body)
	}
}
