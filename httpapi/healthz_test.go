package httpapi

import (
	"errors"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestHealthzSaysWhy: /healthz is 503 with the reason while the node cannot
// serve (starting, or a spool that failed a sync), 200 otherwise.
func TestHealthzSaysWhy(t *testing.T) {
	var why error = errors.New("storage unavailable: a sync of the telemetry spool failed")
	s := New(Config{}, nil, nil, nil, func() error { return why })
	var ctx fasthttp.RequestCtx
	s.healthz(&ctx)
	if ctx.Response.StatusCode() != 503 || !strings.Contains(string(ctx.Response.Body()), "sync of the telemetry spool failed") {
		t.Fatalf("failed node: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}
