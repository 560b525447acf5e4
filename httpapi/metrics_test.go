package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/storage"
)

// serve runs one request through h (as the router would: with the matched
// route) and returns the response.
func serve(h fasthttp.RequestHandler, method, route string, headers ...string) *fasthttp.Response {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	for _, hd := range headers {
		k, v, _ := strings.Cut(hd, ": ")
		ctx.Request.Header.Set(k, v)
	}
	if route != "" {
		ctx.SetUserValue(router.MatchedRoutePathParam, route)
	}
	h(&ctx)
	var r fasthttp.Response
	ctx.Response.CopyTo(&r)
	return &r
}

func counterValue(t *testing.T, name string) uint64 {
	t.Helper()
	return metrics.GetOrCreateCounter(name).Get()
}

// TestInstrument: requests count by route pattern, method (unknown methods as
// OTHER) and status, and every answer carries its request id.
func TestInstrument(t *testing.T) {
	s := New(Config{}, nil, nil, nil, nil)
	status := fasthttp.StatusOK
	h := s.instrument(func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(status) })
	f := func(method, route string, status int, want uint64) {
		t.Helper()
		name := `sluice_http_requests_total{route="` + route + `",method="` + method + `",status="` + itoa(status) + `"}`
		if got := counterValue(t, name); got != want {
			t.Fatalf("%s = %d, want %d", name, got, want)
		}
	}
	serve(h, "POST", "/test/{token}/a")
	serve(h, "POST", "/test/{token}/a")
	status = fasthttp.StatusBadRequest
	serve(h, "POST", "/test/{token}/a")
	serve(h, "BREW", "/test/{token}/a")
	serve(h, "GET", "")
	f("POST", "/test/{token}/a", 200, 2)
	f("POST", "/test/{token}/a", 400, 1)
	f("OTHER", "/test/{token}/a", 400, 1)
	f("GET", "unmatched", 400, 1)

	if id := serve(h, "GET", "/x", "X-Request-Id: lb-1.a_B").Header.Peek("X-Request-Id"); string(id) != "lb-1.a_B" {
		t.Fatalf("sane id not echoed: %q", id)
	}
	a := serve(h, "GET", "/x", "X-Request-Id: no spaces please").Header.Peek("X-Request-Id")
	b := serve(h, "GET", "/x").Header.Peek("X-Request-Id")
	if len(a) == 0 || bytes.Equal(a, b) || bytes.ContainsAny(a, " ") {
		t.Fatalf("generated ids %q, %q", a, b)
	}
}

// BenchmarkInstrument is the per-request cost of the request metrics and the
// request id around a handler that does nothing: compare with
// BenchmarkUninstrumented.
func BenchmarkInstrument(b *testing.B) {
	s := New(Config{}, nil, nil, nil, nil)
	benchHandler(b, s.instrument(func(ctx *fasthttp.RequestCtx) {}))
}

func BenchmarkUninstrumented(b *testing.B) {
	benchHandler(b, func(ctx *fasthttp.RequestCtx) {})
}

func benchHandler(b *testing.B, h fasthttp.RequestHandler) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	b.ReportAllocs()
	for b.Loop() {
		// What the router does for each request: reset, then the matched route.
		ctx.ResetUserValues()
		ctx.SetUserValue(router.MatchedRoutePathParam, "/api/v1/{token}/telemetry")
		h(&ctx)
	}
}

// TestPreroutingCounted: a request fasthttp refuses before routing (a body
// over the limit) counts under route="prerouting"; a device telemetry body
// over the limit also counts as too_large against its device when the node
// has its token cached. A token not cached is neither loaded from storage nor
// counted, and the refused request is no activity of its device.
func TestPreroutingCounted(t *testing.T) {
	n := startTestNode(t)
	ctx := context.Background()
	stats := engine.NewIngestStats(false)
	stats.Start(n.Store, time.Hour, nil)
	t.Cleanup(func() { stats.Close(context.Background()) })
	s := New(Config{MaxBodySize: 10, IngestStats: stats}, n.Eng, nil, nil, nil)
	prerouting := `sluice_http_requests_total{route="prerouting",method="POST",status="413"}`
	tooLarge := `sluice_telemetry_rejected_requests_total{reason="too_large"}`
	token, dev := n.Demo.DemoDeviceToken, n.Demo.DemoDeviceID
	refuse := func(paths ...string) {
		for _, path := range paths {
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod("POST")
			ctx.Request.SetRequestURI(path)
			s.ErrorHandler(&ctx, fasthttp.ErrBodyTooLarge)
		}
	}
	active := func() bool {
		t.Helper()
		attrs, err := n.Eng.Attributes(ctx, dev, storage.ServerScope, []string{"active"})
		if err != nil || len(attrs) != 1 {
			t.Fatalf("active: %v %v", attrs, err)
		}
		return attrs[0].Value.Bool
	}
	if active() {
		t.Fatal("the demo device is active before any request")
	}

	before, beforeTooLarge := counterValue(t, prerouting), counterValue(t, tooLarge)
	refuse("/api/v1/"+token+"/telemetry", "/api/v1/unknown/telemetry", "/api/device")
	if got := counterValue(t, prerouting) - before; got != 3 {
		t.Fatalf("prerouting 413s counted: %d, want 3", got)
	}
	if got := counterValue(t, tooLarge) - beforeTooLarge; got != 0 {
		t.Fatalf("too_large requests counted: %d, want 0 (no token cached)", got)
	}
	if _, ok := n.Eng.CachedDeviceByToken(token); ok {
		t.Fatal("a refused request loaded its token")
	}
	if active() {
		t.Fatal("a refused request made its device active")
	}

	// Once the device has made a request on the node, its oversized bodies count.
	if _, err := n.Eng.DeviceByToken(ctx, token); err != nil {
		t.Fatal(err)
	}
	refuse("/api/v1/"+token+"/telemetry", "/api/v1/unknown/telemetry")
	if got := counterValue(t, tooLarge) - beforeTooLarge; got != 1 {
		t.Fatalf("too_large requests counted: %d, want 1 (the cached device's)", got)
	}
	if err := stats.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := n.Store.Counters(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	if c["rejected:too_large"] != 1 {
		t.Fatalf("device counters: %v", c)
	}
}

func TestTelemetryToken(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/abc/telemetry": "abc", "/api/v1//telemetry": "", "/api/v1/a/b/telemetry": "",
		"/api/v1/abc/attributes": "", "/x/api/v1/abc/telemetry": "",
	} {
		if got, ok := telemetryToken([]byte(path)); got != want || ok != (want != "") {
			t.Fatalf("%s: %q %v", path, got, ok)
		}
	}
}

// TestExpectOverLimitCounted: a body announced over the limit with "Expect:
// 100-continue" (curl's way past 1 MiB) is refused before it is sent, and
// fasthttp then calls neither the handler nor ErrorHandler. ExpectHandler
// answers it as ErrorHandler answers a body sent over the limit: the JSON 413
// with its CORS headers, counted under route="prerouting".
func TestExpectOverLimitCounted(t *testing.T) {
	s := New(Config{MaxBodySize: 10, CORSOrigins: []string{"https://app.example.com"}}, nil, nil, nil, nil)
	srv := &fasthttp.Server{Handler: s.Handler(), ErrorHandler: s.ErrorHandler, ExpectHandler: s.ExpectHandler, MaxRequestBodySize: 10}
	ln := fasthttputil.NewInmemoryListener()
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	prerouting := `sluice_http_requests_total{route="prerouting",method="POST",status="413"}`
	before := counterValue(t, prerouting)

	c, err := ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("POST /api/device HTTP/1.1\r\nHost: node\r\nOrigin: https://app.example.com\r\n" +
		"Content-Type: application/json\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	var resp fasthttp.Response
	if err := resp.Read(bufio.NewReader(c)); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != 413 || !bytes.Contains(resp.Body(), []byte(`"Payload size exceeds the limit of 10 bytes"`)) {
		t.Fatalf("answer %d %s", resp.StatusCode(), resp.Body())
	}
	if got := string(resp.Header.Peek("Access-Control-Allow-Origin")); got != "https://app.example.com" {
		t.Fatalf("Access-Control-Allow-Origin %q", got)
	}
	if got := counterValue(t, prerouting) - before; got != 1 {
		t.Fatalf("prerouting 413s counted: %d, want 1", got)
	}
	// A body within the limit is invited as before.
	if st := s.ExpectHandler(expectCtx(10)); st != fasthttp.StatusContinue {
		t.Fatalf("a body within the limit: %d", st)
	}
}

func expectCtx(length int) *fasthttp.RequestCtx {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.Header.SetContentLength(length)
	return &ctx
}
