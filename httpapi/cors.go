package httpapi

import (
	"bytes"
	"slices"

	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// CORS on /api/, as ThingsBoard configures Spring for /api/** by default
// (spring.mvc.cors.mappings: any origin pattern, method and header,
// credentials allowed, max-age 1800): a browser application served from
// another origin can call the API. Authentication travels in the
// X-Authorization header, never in a cookie, so a page cannot borrow a
// signed-in user's session by being allowed. Config.CORSOrigins narrows the
// origins (others get 403, as from Spring); none turns CORS off: requests pass
// unmarked, and browsers keep their answers from other origins' pages.

// corsMaxAge is how long a browser may cache a preflight answer, in seconds.
const corsMaxAge = "1800"

// cors answers preflights and marks cross-origin answers on /api/.
func (s *Server) cors(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		origin := s.crossOrigin(ctx)
		if origin == nil {
			next(ctx)
			return
		}
		preflight := ctx.IsOptions() && len(ctx.Request.Header.Peek("Access-Control-Request-Method")) > 0
		if !s.corsAllowed(origin) {
			// Spring's DefaultCorsProcessor: 403 for an origin not allowed.
			writeError(ctx, fasthttp.StatusForbidden, engine.CodePermissionDenied, "Invalid CORS request")
			return
		}
		if preflight {
			h := &ctx.Response.Header
			h.Set("Access-Control-Allow-Methods", string(ctx.Request.Header.Peek("Access-Control-Request-Method")))
			if hdrs := ctx.Request.Header.Peek("Access-Control-Request-Headers"); len(hdrs) > 0 {
				h.Set("Access-Control-Allow-Headers", string(hdrs))
			}
			h.Set("Access-Control-Max-Age", corsMaxAge)
			corsHeaders(ctx, origin)
			return
		}
		next(ctx)
		corsHeaders(ctx, origin) // after the handler: an error answer resets the headers
	}
}

// crossOrigin returns the Origin of a cross-origin request to /api/ while
// CORS is on, else nil.
func (s *Server) crossOrigin(ctx *fasthttp.RequestCtx) []byte {
	origin := ctx.Request.Header.Peek("Origin")
	if len(origin) == 0 || len(s.cfg.CORSOrigins) == 0 || !bytes.HasPrefix(ctx.Path(), []byte("/api/")) || sameOrigin(ctx, origin) {
		return nil
	}
	return origin
}

// corsHeaders allows origin to read the answer.
func corsHeaders(ctx *fasthttp.RequestCtx, origin []byte) {
	h := &ctx.Response.Header
	h.SetBytesV("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Credentials", "true")
	h.Add("Vary", "Origin")
}

func (s *Server) corsAllowed(origin []byte) bool {
	return slices.Contains(s.cfg.CORSOrigins, "*") || slices.Contains(s.cfg.CORSOrigins, string(origin))
}

// sameOrigin tells a browser's Origin naming the host it asks (the docs page
// calling its own node), which is no CORS request.
func sameOrigin(ctx *fasthttp.RequestCtx, origin []byte) bool {
	rest, ok := bytes.CutPrefix(origin, []byte("https://"))
	if !ok {
		if rest, ok = bytes.CutPrefix(origin, []byte("http://")); !ok {
			return false
		}
	}
	return bytes.EqualFold(rest, ctx.Host())
}
