package httpapi

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
)

// TestReportQueue: with one report running and the queue (capacity 1) holding
// another, the next is refused with 429; once the running one ends, the queued
// one completes. The running report is simulated by holding its slot.
func TestReportQueue(t *testing.T) {
	n := startTestNode(t)
	lim := newReportLimiter(1, 1)
	r := router.New()
	n.API.reportRoutes(r, lim)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: r.Handler}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.ShutdownWithContext(ctx)
	})
	q := &testNode{t: t, URL: "http://" + ln.Addr().String()}

	auth := n.tenant()
	n.expect("POST", "/api/device", auth, map[string]string{"name": "q1", "type": "meter"}, 200, "")
	var v struct{ ID struct{ ID string } }
	n.decode(n.expect("POST", "/api/analytics/view", auth, `{"name":"q","source":{"deviceProfile":"meter"},
		"fields":[{"label":"Device","source":"ENTITY_NAME"}]}`, 200, ""), &v)
	body := `{"viewConfigId":"` + v.ID.ID + `"}`
	path := "/apiAnalytics/publicApi/buildReport"

	lim.admitted <- struct{}{} // the running report
	lim.running <- struct{}{}
	queued := make(chan []byte)
	go func() {
		_, out := q.do("POST", path, auth, body)
		queued <- out
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(lim.admitted) < 2 { // the request above waits in the queue
		if time.Now().After(deadline) {
			t.Fatal("the second report never queued")
		}
		runtime.Gosched()
	}
	body429 := q.expect("POST", path, auth, body, 429, "")
	var e apiError
	q.decode(body429, &e)
	if e.ErrorCode != 33 {
		t.Fatalf("429 body: %s", body429)
	}
	<-lim.running // the running report ends
	<-lim.admitted
	if out := <-queued; string(out) != `{"columnLabels":["Device"],"dataTable":[{"Device":"q1"}]}` {
		t.Fatalf("queued report: %s", out)
	}
	q.expect("POST", path, auth, body, 200, "")
	if len(lim.admitted) != 0 || len(lim.running) != 0 {
		t.Fatalf("slots left taken: %d admitted, %d running", len(lim.admitted), len(lim.running))
	}
}

// TestReportQueueZero: with no queue, a report that cannot run at once is refused.
func TestReportQueueZero(t *testing.T) {
	lim := newReportLimiter(2, 0)
	for range 2 {
		if ok, _ := lim.enter(nil); !ok {
			t.Fatal("a free slot refused")
		}
	}
	if ok, full := lim.enter(nil); ok || !full {
		t.Fatalf("third report: ok %v, full %v", ok, full)
	}
	lim.leave()
	if ok, _ := lim.enter(nil); !ok {
		t.Fatal("a freed slot refused")
	}
}
