package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCloseEndsRPCCalls: Close answers a REST RPC call that waits for the
// device's reply 503 at once (the RPC is dropped), and RPC polls too.
func TestCloseEndsRPCCalls(t *testing.T) {
	n := startTestNode(t)
	auth := n.tenant()
	dev := n.Demo.DemoDeviceID.String()
	call := make(chan int, 1)
	go func() {
		status, body := n.do("POST", "/api/rpc/twoway/"+dev, auth, `{"method":"m","timeout":60000}`)
		if status != 503 {
			t.Errorf("waiting RPC call at Close: %d %s", status, body)
		}
		call <- status
	}()
	// The device takes the RPC, so the call now waits for the reply.
	n.expect("GET", "/api/v1/"+n.Demo.DemoDeviceToken+"/rpc?timeout=60000", "", nil, 200, "")
	n.API.Close()
	<-call
	n.expect("GET", "/api/v1/"+n.Demo.DemoDeviceToken+"/rpc?timeout=60000", "", nil, 503, "Node is shutting down, poll again")
	n.expect("POST", "/api/rpc/oneway/"+dev, auth, `{"method":"m"}`, 503, "")
}

// TestRPCReplyBodyRequired: a device's reply without a body is 400 "Required
// request body is missing" (errorCode 31), as Spring answers ThingsBoard's
// required @RequestBody before the token is looked at.
func TestRPCReplyBodyRequired(t *testing.T) {
	n := startTestNode(t)
	for _, token := range []string{n.Demo.DemoDeviceToken, "NO_SUCH_TOKEN"} {
		out := n.expect("POST", "/api/v1/"+token+"/rpc/0", "", nil, 400, "Required request body is missing")
		var e apiError
		n.decode(out, &e)
		if e.ErrorCode != 31 {
			t.Fatalf("errorCode %d, want 31", e.ErrorCode)
		}
	}
	n.expect("POST", "/api/v1/"+n.Demo.DemoDeviceToken+"/rpc/0", "", `{}`, 200, "")
}

// TestRPCRequestUUID: requestUUID is the RPC's id; one that is no UUID is 400
// "Invalid request body", one already used 400 too.
func TestRPCRequestUUID(t *testing.T) {
	n := startTestNode(t)
	auth := n.tenant()
	path := "/api/rpc/oneway/" + n.Demo.DemoDeviceID.String()
	id := "7d7ab9f0-3c1e-4b8e-9a51-6f2a0c4d9e11"
	out := n.expect("POST", path, auth, `{"method":"m","persistent":true,"requestUUID":"`+id+`"}`, 200, "")
	if string(out) != `{"rpcId":"`+id+`"}` {
		t.Fatalf("answer %s, want the requestUUID as rpcId", out)
	}
	n.expect("GET", "/api/rpc/persistent/"+id, auth, nil, 200, "")
	out = n.expect("POST", path, auth, `{"method":"other","persistent":true,"requestUUID":"`+id+`"}`, 400, "")
	if !strings.Contains(string(out), "Invalid request body") {
		t.Fatalf("duplicate requestUUID: %s", out)
	}
	for _, bad := range []string{`"not-a-uuid"`, `"7d7ab9f03c1e4b8e9a516f2a0c4d9e11"`, `123`, `true`, `{}`, `[]`, `null`,
		`"00000000-0000-0000-0000-000000000000"`} {
		n.expect("POST", path, auth, `{"method":"m","requestUUID":`+bad+`}`, 400, "Invalid request body")
	}
}

// TestPersistentRPCListSortAndShape: sortProperty request and response are
// accepted (ThingsBoard's allowed values, with createdTime, expirationTime and
// Sluice's status); a listed RPC's request has no additionalInfo.
func TestPersistentRPCListSortAndShape(t *testing.T) {
	n := startTestNode(t)
	auth := n.tenant()
	dev := n.Demo.DemoDeviceID.String()
	n.expect("POST", "/api/rpc/twoway/"+dev, auth, `{"method":"m","persistent":true,"additionalInfo":{"note":1}}`, 200, "")
	list := "/api/rpc/persistent/device/" + dev + "?pageSize=10&page=0"
	for _, prop := range []string{"createdTime", "expirationTime", "request", "response", "status"} {
		out := n.expect("GET", list+"&sortProperty="+prop+"&sortOrder=DESC", auth, nil, 200, "")
		var page struct {
			Data []struct {
				AdditionalInfo json.RawMessage            `json:"additionalInfo"`
				Request        map[string]json.RawMessage `json:"request"`
			} `json:"data"`
		}
		n.decode(out, &page)
		if len(page.Data) != 1 || string(page.Data[0].AdditionalInfo) != `{"note":1}` {
			t.Fatalf("sortProperty=%s: %s", prop, out)
		}
		if _, ok := page.Data[0].Request["additionalInfo"]; ok {
			t.Fatalf("request with additionalInfo: %s", out)
		}
	}
	n.expect("GET", list+"&sortProperty=method", auth, nil, 400, "Invalid sort property: method")
}
