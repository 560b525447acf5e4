package httpapi

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
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
