package httpapi

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// analyticsRoutes registers saved analytics views and the report API (analytics.md).
func (s *Server) analyticsRoutes(r *router.Router) {
	threads, queue := s.cfg.ReportThreads, s.cfg.ReportQueue
	if threads <= 0 {
		threads = 10
	}
	s.reportRoutes(r, newReportLimiter(threads, max(queue, 0)))
}

// reportRoutes registers the routes with the limiter lim (tests pass their own).
func (s *Server) reportRoutes(r *router.Router, lim *reportLimiter) {
	r.POST("/api/analytics/view", s.authed(s.saveView))
	r.GET("/api/analytics/view/{viewId}", s.authed(s.getView))
	r.DELETE("/api/analytics/view/{viewId}", s.authed(s.deleteView))
	r.GET("/api/analytics/views", s.authed(s.listViews))
	build := s.buildReport(lim)
	r.POST("/apiAnalytics/publicApi/buildReport", build)
	r.POST("/apiTrendz/publicApi/buildReport", build)
}

func (s *Server) saveView(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	var v engine.View
	if s.readJSON(ctx, &v) {
		out, err := s.eng.SaveView(s.ctx, p, &v)
		s.respond(ctx, out, err)
	}
}

func (s *Server) getView(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "viewId"); ok {
		v, err := s.eng.GetView(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) deleteView(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "viewId"); ok {
		s.done(ctx, s.eng.DeleteView(s.ctx, p, id))
	}
}

func (s *Server) listViews(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListViews(s.ctx, p, pl)
		s.respond(ctx, v, err)
	}
}

// reportLimiter admits `threads` reports at once and lets `queue` more wait;
// past that a report is refused (Trendz's simpleApiRateLimiter: a thread pool
// over a bounded queue).
type reportLimiter struct {
	admitted chan struct{} // running or waiting: capacity threads+queue
	running  chan struct{} // capacity threads
}

func newReportLimiter(threads, queue int) *reportLimiter {
	return &reportLimiter{admitted: make(chan struct{}, threads+queue), running: make(chan struct{}, threads)}
}

// enter waits for a running slot; false when the queue is full, the server is
// closing (closing) or the request ends (gone: its client hung up, or its
// timeout passed).
func (l *reportLimiter) enter(closing, gone <-chan struct{}) (ok, full bool) {
	select {
	case l.admitted <- struct{}{}:
	default:
		return false, true
	}
	select {
	case l.running <- struct{}{}:
		return true, false
	case <-closing:
	case <-gone:
	}
	<-l.admitted
	return false, false
}

func (l *reportLimiter) leave() {
	<-l.running
	<-l.admitted
}

var (
	errReportToken = &engine.Error{Code: engine.CodePermissionDenied, Msg: "JWT token not valid or expired"}
	errReportBusy  = &engine.Error{Code: engine.CodeTooManyRequests,
		Msg: "Too many requests: the report queue is full (SIMPLE_API_RATE_LIMITER_QUEUE_CAPACITY); retry after a short delay"}
)

// buildReport answers a report as JSON, or as CSV when the client accepts
// text/csv (and not JSON first). The JWT comes from the query parameter or the
// header "jwt" (Trendz), or X-Authorization / Authorization; a bad one is 403.
func (s *Server) buildReport(lim *reportLimiter) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		header := reportCredentials(ctx)
		p, err := s.eng.Authenticate(s.ctx, header)
		if err != nil {
			s.log.Debug("report authentication refused", "route", route(ctx), "client", s.clientAddr(ctx), "reason", err.Error())
			var ee *engine.Error
			if errors.As(err, &ee) {
				err = errReportToken // Trendz answers every refused token with 403
			}
			s.fail(ctx, err)
			return
		}
		// A report is a REST request of its user: the tenant and customer
		// limits count it, as authed does for the other routes.
		if !s.allowREST(ctx, p) {
			return
		}
		if !labelledJSON(ctx, true) { // the spec's one 415 rule: required here
			return
		}
		var req engine.ReportRequest
		if !s.decodeBody(ctx, s.maxBodySize(), &req, func(error) {
			writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
				"Invalid request body: want {viewConfigId, rangeStartTs?, rangeEndTs?, filters?: {name: [values]}}")
		}) {
			return
		}
		// The report runs under a context that ends when its client hangs up
		// (nobody would read the answer; a waiting one gives its queue place
		// back) and at the report timeout. It derives from s.ctx, not s.polls:
		// a graceful shutdown lets running reports finish.
		rctx, stop := watchHangup(s.ctx, ctx)
		defer stop()
		rctx, cancel := context.WithTimeoutCause(rctx, s.cfg.ReportTimeout, errReportTimeout)
		defer cancel()
		ok, full := lim.enter(s.polls.Done(), rctx.Done())
		if !ok {
			switch {
			case full:
				s.fail(ctx, &engine.LimitError{Err: errReportBusy, RetryAfter: time.Second}) // Retry-After, as every other 429
			case rctx.Err() != nil:
				s.reportCut(ctx, rctx)
			default:
				s.fail(ctx, &engine.Error{Code: engine.CodeUnavailable, Msg: "Node is shutting down"})
			}
			return
		}
		rep, err := s.build(rctx, lim, p, req)
		if err != nil {
			if rctx.Err() != nil {
				s.reportCut(ctx, rctx)
				return
			}
			s.fail(ctx, err)
			return
		}
		if wantsCSV(ctx) {
			writeCSV(ctx, rep)
			return
		}
		s.writeJSON(ctx, rep)
	}
}

// build runs a report in the slot lim admitted it to, which it gives back even
// if the report panics (the router's recovery answers 500 and serves on; a slot
// lost each time would shrink the report capacity for good).
func (s *Server) build(rctx context.Context, lim *reportLimiter, p *engine.Principal, req engine.ReportRequest) (*engine.Report, error) {
	defer lim.leave()
	return s.eng.BuildReport(rctx, p, req)
}

// statusClientClosed is the status of a request whose client hung up before
// its answer (nginx's 499): no client sees it, the request metrics do.
const statusClientClosed = 499

// errReportTimeout is the cause of a report context that reached
// Config.ReportTimeout.
var errReportTimeout = errors.New("report timeout")

// reportCut answers a report whose context ended before its answer: 503 at the
// timeout, nothing for a client that hung up (the connection is closed).
func (s *Server) reportCut(ctx *fasthttp.RequestCtx, rctx context.Context) {
	if errors.Is(context.Cause(rctx), errHungUp) {
		s.log.Debug("report cancelled: its client closed the connection", "requestId", requestID(ctx), "client", s.clientAddr(ctx))
		// Nobody reads the answer; its status is for the request metrics,
		// which would count a 200 otherwise (nginx's 499, client closed).
		ctx.SetStatusCode(statusClientClosed)
		ctx.SetConnectionClose()
		return
	}
	s.fail(ctx, &engine.Error{Code: engine.CodeUnavailable, Msg: "The report did not finish within " +
		strconv.FormatInt(s.cfg.ReportTimeout.Milliseconds(), 10) +
		" ms (SLUICE_REPORT_TIMEOUT): narrow its range or filters, or retry when fewer reports run"})
}

// reportCredentials is the Authorization-style credential of a report request.
func reportCredentials(ctx *fasthttp.RequestCtx) string {
	if jwt := ctx.QueryArgs().Peek("jwt"); len(jwt) > 0 {
		return "Bearer " + string(jwt)
	}
	if jwt := ctx.Request.Header.Peek("jwt"); len(jwt) > 0 {
		return "Bearer " + string(jwt)
	}
	header := ctx.Request.Header.Peek("X-Authorization")
	if len(bytes.TrimSpace(header)) == 0 {
		header = ctx.Request.Header.Peek("Authorization")
	}
	return string(header)
}

// wantsCSV: Accept names text/csv before any JSON type.
func wantsCSV(ctx *fasthttp.RequestCtx) bool {
	for _, part := range strings.Split(string(ctx.Request.Header.Peek("Accept")), ",") {
		mt, _, _ := strings.Cut(part, ";")
		switch strings.ToLower(strings.TrimSpace(mt)) {
		case "text/csv":
			return true
		case "application/json", "application/*":
			return false
		}
	}
	return false
}

// writeCSV writes the report as RFC 4180 CSV, the header row being the labels.
func writeCSV(ctx *fasthttp.RequestCtx, rep *engine.Report) {
	ctx.SetContentType("text/csv; charset=utf-8")
	w := csv.NewWriter(ctx.Response.BodyWriter())
	w.Write(rep.ColumnLabels)
	rec := make([]string, len(rep.ColumnLabels))
	for _, row := range rep.Rows {
		for i, c := range row {
			rec[i] = engine.CellText(c)
		}
		w.Write(rec)
	}
	w.Flush()
}
