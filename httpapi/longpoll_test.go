package httpapi

import (
	"testing"
	"time"

	"github.com/sluice-iot/sluice/engine"
)

func TestClampPollTimeout(t *testing.T) {
	f := func(ms int64, maxWait, want time.Duration) {
		t.Helper()
		if got := clampPollTimeout(ms, maxWait); got != want {
			t.Fatalf("clampPollTimeout(%d, %v) = %v, want %v", ms, maxWait, got, want)
		}
	}
	f(0, 300*time.Second, 60*time.Second) // absent or 0: ThingsBoard's request_timeout
	f(0, 10*time.Second, 10*time.Second)  // the default is capped too
	f(1, 300*time.Second, time.Millisecond)
	f(250, 300*time.Second, 250*time.Millisecond)
	f(300000, 300*time.Second, 300*time.Second)
	f(300001, 300*time.Second, 300*time.Second)
	f(1<<62, 300*time.Second, 300*time.Second) // no overflow
}

func TestPollTimeoutParameter(t *testing.T) {
	n := startTestNode(t)
	path := "/api/v1/" + n.Demo.DemoDeviceToken + "/attributes/updates?timeout="
	f := func(timeout string, status int, msg string) {
		t.Helper()
		n.expect("GET", path+timeout, "", nil, status, msg)
	}
	f("abc", 400, "Failed to convert value of type 'java.lang.String' to required type 'long'; parameter 'timeout': abc")
	f("1.5", 400, "")
	f("-1", 400, "Invalid timeout: -1; must be milliseconds, 0 or more")
	if status, body := n.do("GET", path+"1", "", nil); status != 408 || len(body) != 0 {
		t.Fatalf("timeout=1: %d %q, want 408 with an empty body", status, body)
	}
	// The timeout is checked before the token, as Spring binds parameters first.
	n.expect("GET", "/api/v1/NO_SUCH_TOKEN/attributes/updates?timeout=x", "", nil, 400, "")
	n.expect("GET", "/api/v1/NO_SUCH_TOKEN/attributes/updates?timeout=1", "", nil, 401, "Invalid access token")
}

// TestCloseEndsPolls: Close answers open polls 503 at once (so a node shutdown
// does not wait for their timeout) and every later poll too.
func TestCloseEndsPolls(t *testing.T) {
	n := startTestNode(t)
	path := "/api/v1/" + n.Demo.DemoDeviceToken + "/attributes/updates?timeout=60000"
	done := make(chan []byte, 1)
	go func() {
		status, body := n.do("GET", path, "", nil)
		if status != 503 {
			t.Errorf("open poll at Close: %d %s", status, body)
		}
		done <- body
	}()
	waitPolls(t, n.Eng, 1)
	n.API.Close()
	<-done
	n.expect("GET", path, "", nil, 503, "Node is shutting down, poll again")
}

// waitPolls waits until eng has want long polls open.
func waitPolls(t *testing.T, eng *engine.Engine, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for eng.OpenPolls() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d polls open, want %d", eng.OpenPolls(), want)
		}
		time.Sleep(time.Millisecond)
	}
}
