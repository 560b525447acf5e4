package httpapi

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestHeadAndAllow: HEAD is answered wherever GET is, with GET's status and
// headers and no body; a 405 says in Allow which methods the path takes.
func TestHeadAndAllow(t *testing.T) {
	n := startTestNode(t)
	send := func(method, path string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, n.URL+path, strings.NewReader(`{"a":1}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
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

	resp, body := send("PUT", "/api/v1/"+n.Demo.DemoDeviceToken+"/telemetry")
	if resp.StatusCode != 405 || !strings.Contains(resp.Header.Get("Allow"), "POST") || !strings.Contains(string(body), `"status":405`) {
		t.Fatalf("PUT telemetry: %d, Allow %q, %s", resp.StatusCode, resp.Header.Get("Allow"), body)
	}
}
