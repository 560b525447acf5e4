package httpapi

import (
	"context"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/embedded"
)

// TestReportQueue: with one report running and the queue (capacity 1) holding
// another, the next is refused with 429; once the running one ends, the queued
// one completes. The running report is simulated by holding its slot.
func TestReportQueue(t *testing.T) {
	lim := newReportLimiter(1, 1)
	_, q, auth, body := reportServer(t, lim)
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

// reportServer serves the report route with lim on a listener of its own and
// saves a view over one device: the node, a client of that listener, a tenant
// administrator's credentials and the report request body.
func reportServer(t *testing.T, lim *reportLimiter) (n, q *testNode, auth, body string) {
	t.Helper()
	n = startTestNode(t)
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
	q = &testNode{t: t, URL: "http://" + ln.Addr().String()}

	auth = n.tenant()
	n.expect("POST", "/api/device", auth, map[string]string{"name": "q1", "type": "meter"}, 200, "")
	var v struct{ ID struct{ ID string } }
	n.decode(n.expect("POST", "/api/analytics/view", auth, `{"name":"q","source":{"deviceProfile":"meter"},
		"fields":[{"label":"Device","source":"ENTITY_NAME"}]}`, 200, ""), &v)
	return n, q, auth, `{"viewConfigId":"` + v.ID.ID + `"}`
}

// TestReportTimeout: a report that passes its timeout, queued or running, is
// 503 saying so.
func TestReportTimeout(t *testing.T) {
	lim := newReportLimiter(1, 1)
	n, q, auth, body := reportServer(t, lim)
	path := "/apiAnalytics/publicApi/buildReport"
	n.API.cfg.ReportTimeout = 50 * time.Millisecond
	lim.admitted <- struct{}{} // a running report holds the one slot
	lim.running <- struct{}{}
	out := q.expect("POST", path, auth, body, 503, "")
	var e apiError
	q.decode(out, &e)
	if e.ErrorCode != 50 || e.Status != 503 || !strings.Contains(e.Message, "within 50 ms (SLUICE_REPORT_TIMEOUT)") {
		t.Fatalf("timeout body: %s", out)
	}
	if len(lim.admitted) != 1 {
		t.Fatalf("the timed-out report kept its queue place: %d admitted", len(lim.admitted))
	}
	<-lim.running
	<-lim.admitted

	n.API.cfg.ReportTimeout = time.Nanosecond // passed before the report reads anything
	if out := q.expect("POST", path, auth, body, 503, ""); !strings.Contains(string(out), "SLUICE_REPORT_TIMEOUT") {
		t.Fatalf("timeout body: %s", out)
	}
	if len(lim.admitted) != 0 || len(lim.running) != 0 {
		t.Fatalf("slots left taken: %d admitted, %d running", len(lim.admitted), len(lim.running))
	}
}

// TestReportHangup: a report waiting in the queue whose client closes its
// connection gives its place back at the next probe, not when a slot frees.
func TestReportHangup(t *testing.T) {
	defer func(d time.Duration) { hangupProbe = d }(hangupProbe)
	hangupProbe = 20 * time.Millisecond
	lim := newReportLimiter(1, 1)
	_, q, auth, body := reportServer(t, lim)
	lim.admitted <- struct{}{} // a running report holds the one slot
	lim.running <- struct{}{}
	c, err := net.Dial("tcp", strings.TrimPrefix(q.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	req := "POST /apiAnalytics/publicApi/buildReport HTTP/1.1\r\nHost: x\r\nX-Authorization: " + auth +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the report to queue", func() bool { return len(lim.admitted) == 2 })
	c.Close()
	waitFor(t, "the queue place back", func() bool { return len(lim.admitted) == 1 })
	<-lim.running
	<-lim.admitted
}

// TestReportCutStatus: a report whose client hung up counts as 499 in the
// request metrics, not as a 200.
func TestReportCutStatus(t *testing.T) {
	s := New(Config{}, nil, nil, nil, nil)
	rctx, cancel := context.WithCancelCause(context.Background())
	cancel(errHungUp)
	var ctx fasthttp.RequestCtx
	s.reportCut(&ctx, rctx)
	if ctx.Response.StatusCode() != statusClientClosed {
		t.Fatalf("status %d", ctx.Response.StatusCode())
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReportQueueZero: with no queue, a report that cannot run at once is refused.
func TestReportQueueZero(t *testing.T) {
	lim := newReportLimiter(2, 0)
	for range 2 {
		if ok, _ := lim.enter(nil, nil); !ok {
			t.Fatal("a free slot refused")
		}
	}
	if ok, full := lim.enter(nil, nil); ok || !full {
		t.Fatalf("third report: ok %v, full %v", ok, full)
	}
	lim.leave()
	if ok, _ := lim.enter(nil, nil); !ok {
		t.Fatal("a freed slot refused")
	}
}

// stuckReports is a store whose telemetry reports run until their context
// ends: started says one began, ended gets its context's error.
type stuckReports struct {
	*embedded.DB
	started chan struct{}
	ended   chan error
}

func (s *stuckReports) Report(ctx context.Context, _ storage.ReportQuery) ([]storage.ReportRow, error) {
	s.started <- struct{}{}
	<-ctx.Done()
	s.ended <- ctx.Err()
	return nil, ctx.Err()
}

// stuckReportServer serves the report route of a front end whose reports run
// until stopped, over the store of a test node, through the request metrics:
// the store, a client, credentials and a body naming a view with a telemetry
// field (so the report reaches the store).
func stuckReportServer(t *testing.T, timeout time.Duration) (st *stuckReports, q *testNode, auth, body string) {
	t.Helper()
	n := startTestNode(t)
	st = &stuckReports{DB: n.Store, started: make(chan struct{}, 1), ended: make(chan error, 1)}
	api := New(Config{ReportTimeout: timeout}, engine.New(st, engine.Config{JWTSigningKey: []byte("httpapi-test-key")}), nil, nil, nil)
	r := router.New()
	r.SaveMatchedRoutePath = true
	api.reportRoutes(r, newReportLimiter(1, 0))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: api.instrument(r.Handler)}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.ShutdownWithContext(ctx)
	})
	auth = n.tenant()
	n.expect("POST", "/api/device", auth, map[string]string{"name": "s1", "type": "meter"}, 200, "")
	var v struct{ ID struct{ ID string } }
	n.decode(n.expect("POST", "/api/analytics/view", auth, `{"name":"s","source":{"deviceProfile":"meter"},
		"fields":[{"label":"Device","source":"ENTITY_NAME"},{"label":"n","source":"TELEMETRY","key":"energy","aggregation":"COUNT"}]}`, 200, ""), &v)
	return st, &testNode{t: t, URL: "http://" + ln.Addr().String()}, auth, `{"viewConfigId":"` + v.ID.ID + `"}`
}

// TestRunningReportTimeout: a report running at its timeout has its storage
// query cancelled and answers 503.
func TestRunningReportTimeout(t *testing.T) {
	st, q, auth, body := stuckReportServer(t, 200*time.Millisecond)
	if out := q.expect("POST", "/apiAnalytics/publicApi/buildReport", auth, body, 503, ""); !strings.Contains(string(out), "SLUICE_REPORT_TIMEOUT") {
		t.Fatalf("timeout body: %s", out)
	}
	<-st.started
	if err := <-st.ended; err != context.DeadlineExceeded {
		t.Fatalf("the storage query ended with %v", err)
	}
}

// TestRunningReportHangup: a running report whose client closes its
// connection has its storage query cancelled at the next probe, and counts as
// 499 in the request metrics.
func TestRunningReportHangup(t *testing.T) {
	defer func(d time.Duration) { hangupProbe = d }(hangupProbe)
	hangupProbe = 20 * time.Millisecond
	st, q, auth, body := stuckReportServer(t, time.Minute)
	path := "/apiAnalytics/publicApi/buildReport"
	closed := `sluice_http_requests_total{route="` + path + `",method="POST",status="499"}`
	before := counterValue(t, closed)
	c, err := net.Dial("tcp", strings.TrimPrefix(q.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	req := "POST " + path + " HTTP/1.1\r\nHost: x\r\nX-Authorization: " + auth +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	<-st.started
	c.Close()
	select {
	case err := <-st.ended:
		if err != context.Canceled {
			t.Fatalf("the storage query ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the storage query of a report whose client hung up still runs after 10 s")
	}
	waitFor(t, "the 499 counted", func() bool { return counterValue(t, closed)-before == 1 })
}
