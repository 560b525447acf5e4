package httpapi

import (
	"testing"

	"github.com/valyala/fasthttp"
)

func TestCORS(t *testing.T) {
	do := func(origins []string, method, path, origin, host string, hdrs ...string) (*fasthttp.Response, bool) {
		t.Helper()
		s := New(Config{CORSOrigins: origins}, nil, nil, nil, nil)
		called := false
		h := s.cors(func(ctx *fasthttp.RequestCtx) {
			called = true
			writeError(ctx, fasthttp.StatusUnauthorized, 10, "no") // headers set after an error answer too
		})
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(method)
		ctx.Request.SetRequestURI(path)
		ctx.Request.Header.SetHost(host)
		if origin != "" {
			ctx.Request.Header.Set("Origin", origin)
		}
		for i := 0; i+1 < len(hdrs); i += 2 {
			ctx.Request.Header.Set(hdrs[i], hdrs[i+1])
		}
		h(&ctx)
		return &ctx.Response, called
	}
	any := []string{"*"}
	// A preflight from any origin, as ThingsBoard's default mapping.
	r, called := do(any, "OPTIONS", "/api/auth/user", "http://app.example", "sluice:8080",
		"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "X-Authorization")
	if called || r.StatusCode() != 200 || string(r.Header.Peek("Access-Control-Allow-Origin")) != "http://app.example" ||
		string(r.Header.Peek("Access-Control-Allow-Methods")) != "GET" || string(r.Header.Peek("Access-Control-Allow-Headers")) != "X-Authorization" ||
		string(r.Header.Peek("Access-Control-Max-Age")) != "1800" || string(r.Header.Peek("Access-Control-Allow-Credentials")) != "true" {
		t.Fatalf("preflight: called %v\n%s", called, r.Header.String())
	}
	// The request itself: answered by the route, marked for the origin.
	r, called = do(any, "GET", "/api/auth/user", "http://app.example", "sluice:8080")
	if !called || r.StatusCode() != 401 || string(r.Header.Peek("Access-Control-Allow-Origin")) != "http://app.example" {
		t.Fatalf("request: called %v\n%s", called, r.Header.String())
	}
	// A listed origin passes, another gets 403; same origin and other paths are no CORS.
	list := []string{"http://app.example"}
	if r, called = do(list, "GET", "/api/auth/user", "http://app.example", "sluice:8080"); !called {
		t.Fatal("listed origin refused")
	}
	if r, called = do(list, "GET", "/api/auth/user", "http://evil.example", "sluice:8080"); called || r.StatusCode() != 403 {
		t.Fatalf("other origin: called %v status %d", called, r.StatusCode())
	}
	if r, called = do(nil, "GET", "/api/auth/user", "http://sluice:8080", "sluice:8080"); !called || len(r.Header.Peek("Access-Control-Allow-Origin")) != 0 {
		t.Fatalf("same origin: called %v\n%s", called, r.Header.String())
	}
	if r, called = do(nil, "GET", "/api/auth/user", "http://app.example", "sluice:8080"); !called || len(r.Header.Peek("Access-Control-Allow-Origin")) != 0 {
		t.Fatalf("CORS off: called %v\n%s", called, r.Header.String())
	}
	if _, called = do(nil, "GET", "/healthz", "http://app.example", "sluice:8080"); !called {
		t.Fatal("CORS applied outside /api/")
	}
}

// TestCORSOnErrorHandler: a body over the limit, refused before routing, is
// marked for an allowed origin so that its page sees the 413.
func TestCORSOnErrorHandler(t *testing.T) {
	for _, c := range []struct {
		origins []string
		origin  string
		want    string
	}{
		{[]string{"*"}, "http://app.example", "http://app.example"},
		{[]string{"http://other.example"}, "http://app.example", ""},
		{nil, "http://app.example", ""},
	} {
		s := New(Config{CORSOrigins: c.origins, MaxBodySize: 10}, nil, nil, nil, nil)
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI("/api/v1/token/telemetry")
		ctx.Request.Header.SetHost("sluice:8080")
		ctx.Request.Header.Set("Origin", c.origin)
		s.ErrorHandler(&ctx, fasthttp.ErrBodyTooLarge)
		if ctx.Response.StatusCode() != 413 || string(ctx.Response.Header.Peek("Access-Control-Allow-Origin")) != c.want {
			t.Fatalf("%v: %d, allowed %q", c.origins, ctx.Response.StatusCode(), ctx.Response.Header.Peek("Access-Control-Allow-Origin"))
		}
	}
}
