package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// defaultPollTimeout is the wait of a long poll that gives no timeout or 0
// (ThingsBoard's transport.http.request_timeout).
const defaultPollTimeout = 60 * time.Second

// getAttributeUpdates is the shared-attribute long poll (compat §1.4): 200 with
// the keys of the next shared-attribute change, 408 with an empty body at timeout.
func (s *Server) getAttributeUpdates(ctx *fasthttp.RequestCtx) {
	timeout, ok := s.pollTimeout(ctx)
	if !ok {
		return
	}
	dev, ok := s.device(ctx)
	if !ok {
		return
	}
	wctx, stop := s.untilHangup(ctx)
	defer stop()
	body, ok, err := s.eng.WaitSharedAttributes(wctx, dev.UUID(), pathParam(ctx, "token"), timeout)
	s.answerPoll(ctx, body, ok, hungUp(wctx, err))
}

// pollTimeout reads ?timeout=ms; a non-integer or negative value is a 400.
func (s *Server) pollTimeout(ctx *fasthttp.RequestCtx) (time.Duration, bool) {
	ms, ok := int64Param(ctx, "timeout", 0)
	if !ok {
		return 0, false
	}
	if ms < 0 {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
			"Invalid timeout: "+string(ctx.QueryArgs().Peek("timeout"))+"; must be milliseconds, 0 or more")
		return 0, false
	}
	return clampPollTimeout(ms, s.cfg.LongPollMaxTimeout), true
}

// clampPollTimeout turns a requested timeout in ms (0: the default) into the wait,
// at most maxWait.
func clampPollTimeout(ms int64, maxWait time.Duration) time.Duration {
	if ms == 0 {
		return min(defaultPollTimeout, maxWait)
	}
	if ms >= maxWait.Milliseconds() { // compared in ms: ms * time.Millisecond may overflow
		return maxWait
	}
	return time.Duration(ms) * time.Millisecond
}

// answerPoll writes the outcome of a long poll: 200 with body, 408 with an empty
// body when nothing came in time (as ThingsBoard) or its client has gone (no one
// reads it), 503 when the node shuts down.
func (s *Server) answerPoll(ctx *fasthttp.RequestCtx, body []byte, ok bool, err error) {
	switch {
	case errors.Is(err, errHungUp), errors.Is(err, engine.ErrClientGone):
		ctx.SetStatusCode(fasthttp.StatusRequestTimeout)
		ctx.Response.Header.SetNoDefaultContentType(true)
	case errors.Is(err, context.Canceled):
		writeError(ctx, fasthttp.StatusServiceUnavailable, engine.CodeUnavailable, "Node is shutting down, poll again")
	case err != nil:
		s.fail(ctx, err)
	case !ok:
		ctx.SetStatusCode(fasthttp.StatusRequestTimeout)
		ctx.Response.Header.SetNoDefaultContentType(true)
	default:
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}
}
