package httpapi

import (
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
