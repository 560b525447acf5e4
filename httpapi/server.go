// Package httpapi is the HTTP front end of a Sluice node: the ThingsBoard device
// API under /api/v1/{token}, the platform REST API under /api, and health. Handlers
// are thin: decode, call one engine or ingest function, encode.
package httpapi

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/bytedance/sonic"
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/codec"
	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/ingest"
)

// Config holds the front-end limits.
type Config struct {
	// MaxBodySize is the largest request body accepted, in bytes (413 past it).
	MaxBodySize int
	// Limits bound the JSON of device and REST bodies.
	Limits codec.Limits
	// LongPollMaxTimeout caps the timeout a device asks of a long poll (300 s by
	// default, ThingsBoard's transport.http.max_request_timeout).
	LongPollMaxTimeout time.Duration
	// ReportThreads reports are built at once and ReportQueue more may wait; past
	// that the report API answers 429 (SIMPLE_API_RATE_LIMITER_*, 10 and 10).
	ReportThreads int
	ReportQueue   int
	// ReportTimeout bounds a report, its wait in the queue included: past it
	// the report stops and the answer is 503 (SLUICE_REPORT_TIMEOUT, 120 s).
	ReportTimeout time.Duration
	// IngestStats counts telemetry requests refused before the writer (bad body,
	// 413, 415, 429) per device; nil counts nothing. The writer counts the rest.
	IngestStats *engine.IngestStats
	// TrustedProxies are the load balancers whose X-Forwarded-For names the
	// client (clientAddr).
	TrustedProxies []netip.Prefix
	// CORSOrigins may call /api/ from a browser page of another origin: "*" any,
	// none (nil) no CORS (cors.go).
	CORSOrigins []string
}

// Server serves the HTTP APIs of one node.
type Server struct {
	cfg    Config
	eng    *engine.Engine
	ingest *ingest.Writer
	log    *slog.Logger
	ready  func() error
	// ctx is what handlers pass to the engine and the writer instead of the
	// *fasthttp.RequestCtx: that one is not a safe context.Context (its Done races
	// with Server.Shutdown), and storage clients derive contexts from what they get.
	ctx context.Context
	// polls ends when the node shuts down (Close): open long polls answer at once
	// instead of holding the shutdown for their whole timeout. It is not ctx, so
	// writes in flight during a graceful shutdown still complete.
	polls     context.Context
	stopPolls context.CancelFunc

	inflate    inflateBudget  // decompressed bodies of all requests (body.go)
	reqMetrics requestMetrics // see metrics.go
	gauges     *metrics.Set   // this node's gauges on /metrics
}

// New returns the front end over eng and the telemetry writer w. ready says
// why the node cannot serve (for /healthz: starting, or a failed spool), nil
// when it can; a nil ready means always.
func New(cfg Config, eng *engine.Engine, w *ingest.Writer, log *slog.Logger, ready func() error) *Server {
	if ready == nil {
		ready = func() error { return nil }
	}
	if cfg.LongPollMaxTimeout <= 0 {
		cfg.LongPollMaxTimeout = 300 * time.Second
	}
	if cfg.ReportTimeout <= 0 {
		cfg.ReportTimeout = 120 * time.Second
	}
	polls, stopPolls := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, eng: eng, ingest: w, log: logger(log), ready: ready, ctx: context.Background(),
		polls: polls, stopPolls: stopPolls, gauges: metrics.NewSet()}
	s.inflate.left.Store(inflateBudgetFor(s.maxBodySize()))
	s.gauges.NewGauge(`sluice_long_polls_open`, func() float64 { return float64(eng.OpenPolls()) })
	return s
}

// Close ends every open long poll (503) and makes later ones answer 503 at once.
// Call it before fasthttp.Server.Shutdown, which otherwise waits for them.
func (s *Server) Close() { s.stopPolls() }

// Handler returns the request handler with every route.
func (s *Server) Handler() fasthttp.RequestHandler {
	return s.instrument(s.cors(headAsGet(s.routes().Handler)))
}

// headAsGet answers HEAD wherever GET is routed, as HTTP requires (load
// balancers check /healthz with HEAD): the GET handler runs and fasthttp sends
// its headers, Content-Length included, without the body. Not on the device's
// RPC poll, whose GET delivers the RPC it answers: a HEAD would take it and
// throw it away (405 there).
func headAsGet(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if !ctx.IsHead() || deviceRPCPoll(ctx.Path()) {
			h(ctx)
			return
		}
		ctx.SetUserValue(headRequest{}, true) // for the 405's message
		ctx.Request.Header.SetMethod(fasthttp.MethodGet)
		h(ctx)
		ctx.Request.Header.SetMethod(fasthttp.MethodHead)
	}
}

// headRequest marks a HEAD request answered as a GET.
type headRequest struct{}

// deviceRPCPoll tells the path of GET /api/v1/{token}/rpc.
func deviceRPCPoll(path []byte) bool {
	return bytes.HasPrefix(path, []byte("/api/v1/")) && bytes.HasSuffix(path, []byte("/rpc"))
}

// method is the request's method as the client sent it.
func method(ctx *fasthttp.RequestCtx) string {
	if ctx.UserValue(headRequest{}) != nil {
		return fasthttp.MethodHead
	}
	return string(ctx.Method())
}

// routes builds the router with every route; tests list its routes.
func (s *Server) routes() *router.Router {
	r := router.New()
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.SaveMatchedRoutePath = true // for log lines: the pattern, not the token-bearing path
	r.GET("/healthz", s.healthz)
	r.GET("/metrics", s.serveMetrics)
	r.GET("/api/device/{deviceId}/ingestStats", s.authed(s.getIngestStats))
	s.deviceRoutes(r)
	s.authRoutes(r)
	s.entityRoutes(r)
	s.tenantProfileRoutes(r)
	s.telemetryRoutes(r)
	s.rpcRoutes(r)
	s.ruleRoutes(r)
	s.claimRoutes(r)
	s.otaRoutes(r)
	s.analyticsRoutes(r)
	s.docsRoutes(r)
	r.NotFound = func(ctx *fasthttp.RequestCtx) {
		writeError(ctx, fasthttp.StatusNotFound, engine.CodeItemNotFound, "Path not found: "+string(ctx.Path()))
	}
	r.MethodNotAllowed = func(ctx *fasthttp.RequestCtx) {
		allow := string(ctx.Response.Header.Peek("Allow")) // the router's, which writeError resets
		writeError(ctx, fasthttp.StatusMethodNotAllowed, engine.CodeBadRequestParams,
			"Request method '"+method(ctx)+"' is not supported")
		if allow != "" {
			ctx.Response.Header.Set("Allow", allow)
		}
	}
	r.PanicHandler = func(ctx *fasthttp.RequestCtx, v any) {
		s.log.Error("handler panic", "requestId", requestID(ctx), "route", route(ctx), "panic", v)
		writeError(ctx, fasthttp.StatusInternalServerError, engine.CodeGeneral, "Internal server error")
	}
	return r
}

// ErrorHandler answers requests fasthttp rejects before routing (body too large,
// malformed request line or headers) with the JSON error body.
func (s *Server) ErrorHandler(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var netErr *net.OpError
	switch {
	case err == fasthttp.ErrBodyTooLarge:
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, engine.CodeBadRequestParams,
			"Payload size exceeds the limit of "+itoa(s.cfg.MaxBodySize)+" bytes")
	case errors.As(err, &small):
		writeError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, engine.CodeBadRequestParams, "Request headers are too large")
	case errors.As(err, &netErr) && netErr.Timeout():
		writeError(ctx, fasthttp.StatusRequestTimeout, engine.CodeBadRequestParams, "Request not received in time")
	default:
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Malformed HTTP request")
	}
	// A page on another origin sees the error (a body over the limit: its
	// headers were read) rather than a network failure.
	if origin := s.crossOrigin(ctx); origin != nil && s.corsAllowed(origin) {
		corsHeaders(ctx, origin)
	}
	s.countPrerouting(ctx, err == fasthttp.ErrBodyTooLarge)
}

// ExpectHandler is fasthttp.Server.ExpectHandler: a request with "Expect:
// 100-continue" announcing a body over the limit is refused before the client
// sends it (fasthttp would invite the body, then 413). fasthttp then calls
// neither the handler nor ErrorHandler, so the refusal goes through
// ErrorHandler here: the same JSON 413 with its CORS headers, counted under
// route="prerouting" and against its device, as a body sent over the limit
// (curl asks 100-continue for every body over 1 MiB).
func (s *Server) ExpectHandler(ctx *fasthttp.RequestCtx) int {
	if ctx.Request.Header.ContentLength() > s.maxBodySize() {
		s.ErrorHandler(ctx, fasthttp.ErrBodyTooLarge)
		return fasthttp.StatusRequestEntityTooLarge
	}
	return fasthttp.StatusContinue
}

// countPrerouting counts a request answered by ErrorHandler, which no route
// (and so no instrument) saw, under route="prerouting". A telemetry body over
// the limit also counts against its device's ingest statistics, as a
// compressed one that inflates past the limit does in the handler: its
// headers, path included, were read. The device is looked up in the node's
// token cache alone (CachedDeviceByToken): a refused request neither counts
// as the device's activity nor costs a storage read, which a flood of
// oversized bodies with made-up tokens would otherwise cost per request. A
// device whose token is not cached on this node (it has made no request here
// for the cache's lifetime, 30 s by default) is then not counted.
func (s *Server) countPrerouting(ctx *fasthttp.RequestCtx, tooLarge bool) {
	s.reqMetrics.of(ctx.Method(), "prerouting").counter(ctx.Response.StatusCode()).Inc()
	if !tooLarge || s.cfg.IngestStats == nil {
		return
	}
	token, ok := telemetryToken(ctx.Path())
	if !ok {
		return
	}
	if dev, ok := s.eng.CachedDeviceByToken(token); ok {
		s.cfg.IngestStats.RejectedRequest(dev.UUID(), engine.RejectTooLarge)
	}
}

// telemetryToken is the token of a device telemetry path,
// /api/v1/{token}/telemetry.
func telemetryToken(path []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(path, []byte("/api/v1/"))
	if !ok {
		return "", false
	}
	token, ok := bytes.CutSuffix(rest, []byte("/telemetry"))
	if !ok || len(token) == 0 || bytes.IndexByte(token, '/') >= 0 {
		return "", false
	}
	return string(token), true
}

func (s *Server) healthz(ctx *fasthttp.RequestCtx) {
	if err := s.ready(); err != nil {
		writeError(ctx, fasthttp.StatusServiceUnavailable, engine.CodeUnavailable, err.Error())
		return
	}
	ctx.SetContentType("application/json")
	// openPolls lets an operator (and the many-polls test) see the device long
	// polls this node holds.
	b := strconv.AppendInt([]byte(`{"status":"UP","openPolls":`), s.eng.OpenPolls(), 10)
	ctx.SetBody(append(b, '}'))
}

// writeJSON encodes v as the 200 response body.
func (s *Server) writeJSON(ctx *fasthttp.RequestCtx, v any) {
	b, err := sonic.Marshal(v)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// strictJSON decodes REST bodies. Sonic's default lets raw control characters
// through inside strings; ThingsBoard's Jackson refuses them, and so do we.
var strictJSON = sonic.Config{ValidateString: true}.Froze()

// decodeJSON decodes a whole REST body into v. codec.CheckJSON first refuses
// invalid UTF-8 (which sonic passes through even with ValidateString), raw
// control characters, and JSON nested deeper or with more keys in an object
// than lim allows (free-form fields such as RPC params would otherwise reach
// the store unchecked); that refusal is a *codec.Error.
func decodeJSON(body []byte, v any, lim codec.Limits) error {
	// Jackson skips a UTF-8 byte order mark, which some Windows tools write.
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	if err := codec.CheckJSON(body, lim); err != nil {
		return err
	}
	return strictJSON.Unmarshal(body, v)
}

// readJSON decodes a REST request's JSON body into v. A Content-Type that is
// not JSON (application/json or a +json type) is a 415, as Spring answers
// ThingsBoard's clients; none at all is taken as JSON. A bad body is a 400,
// which names the limit when one was passed.
func (s *Server) readJSON(ctx *fasthttp.RequestCtx, v any) bool {
	return labelledJSON(ctx, false) && s.decodeJSONBody(ctx, min(s.maxBodySize(), maxRESTBody), v)
}

// maxRESTBody caps a REST API's JSON body, as ThingsBoard's
// server.http.max_payload_size caps /api/** (16 MiB): an RPC's params, say,
// are stored and handed to a device whole. SLUICE_MAX_BODY_SIZE, when lower,
// is the limit.
const maxRESTBody = 16 << 20

// labelledJSON answers 415 and reports false unless the request's Content-Type
// (without parameters, in any case) is application/json, or, unless exact, a
// +json type or none at all.
func labelledJSON(ctx *fasthttp.RequestCtx, exact bool) bool {
	mt, _, _ := strings.Cut(string(ctx.Request.Header.ContentType()), ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	if mt == "application/json" || !exact && (mt == "" || strings.HasSuffix(mt, "+json")) {
		return true
	}
	writeError(ctx, fasthttp.StatusUnsupportedMediaType, engine.CodeBadRequestParams,
		"Content type '"+string(ctx.Request.Header.ContentType())+"' not supported: send Content-Type: application/json")
	return false
}

// readAnyJSON is readJSON whatever the Content-Type: devices' bodies (provision)
// are JSON however curl labels them, as on the rest of the device API.
func (s *Server) readAnyJSON(ctx *fasthttp.RequestCtx, v any) bool {
	return s.decodeJSONBody(ctx, s.maxBodySize(), v)
}

// decodeJSONBody decodes a JSON body of at most limit bytes (decompressed) into
// v; a bad body is a 400 that names the limit it passed.
func (s *Server) decodeJSONBody(ctx *fasthttp.RequestCtx, limit int, v any) bool {
	return s.decodeBody(ctx, limit, v, func(err error) {
		msg := "Invalid request body"
		if ce := (*codec.Error)(nil); errors.As(err, &ce) && ce.Limit {
			msg += ": " + ce.Msg
		}
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, msg)
	})
}

// decodeBody decodes the JSON body of ctx, at most limit bytes once
// decompressed (withBody), into v. It reports false when it answered the
// request: for an encoding withBody refuses, or through bad for a body that
// does not decode.
func (s *Server) decodeBody(ctx *fasthttp.RequestCtx, limit int, v any, bad func(error)) bool {
	ok := false
	// sonic copies its input, so v holds nothing of body, which the pool reuses.
	s.withBody(ctx, limit, func(body []byte) {
		if err := decodeJSON(body, v, s.cfg.Limits); err != nil {
			bad(err)
			return
		}
		ok = true
	})
	return ok
}
