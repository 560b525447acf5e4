package httpapi

import (
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/codec"
	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/ingest"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// statusOf maps a ThingsBoard error code to its HTTP status (compat §7.6).
func statusOf(c engine.Code) int {
	switch c {
	case engine.CodeAuthentication, engine.CodeJWTExpired, engine.CodeCredentialsExp:
		return fasthttp.StatusUnauthorized
	case engine.CodePermissionDenied, engine.CodeEntitiesLimit:
		return fasthttp.StatusForbidden
	case engine.CodeInvalidArguments, engine.CodeBadRequestParams:
		return fasthttp.StatusBadRequest
	case engine.CodeItemNotFound:
		return fasthttp.StatusNotFound
	case engine.CodeTooManyRequests:
		return fasthttp.StatusTooManyRequests
	case engine.CodeVersionConflict:
		return fasthttp.StatusConflict
	case engine.CodeUnavailable:
		return fasthttp.StatusServiceUnavailable
	}
	return fasthttp.StatusInternalServerError
}

// fail is the one place that turns an error into the JSON error body
// {"status","message","errorCode","timestamp"}.
func (s *Server) fail(ctx *fasthttp.RequestCtx, err error) {
	defer setRetryAfter(ctx, err) // a refused request says when to retry (ratelimit.go)
	var (
		ee          *engine.Error
		ce          *codec.Error
		badType     *codec.UnsupportedTypeError
		badEncoding *unsupportedEncodingError
		badBody     *corruptBodyError
		tooLarge    *tooLargeError
		overLimit   *engine.EntitiesLimitError
	)
	switch {
	case errors.As(err, &tooLarge):
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, engine.CodeBadRequestParams,
			"Payload size exceeds the limit of "+itoa(tooLarge.limit)+" bytes")
	case errors.As(err, &badType), errors.As(err, &badEncoding):
		writeError(ctx, fasthttp.StatusUnsupportedMediaType, engine.CodeBadRequestParams, err.Error())
	case errors.As(err, &badBody):
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, err.Error())
	case errors.As(err, &overLimit):
		// ThingsBoard's ThingsboardEntitiesLimitExceededResponse: the error
		// body with the entity type and the limit.
		writeError(ctx, statusOf(overLimit.Err.Code), overLimit.Err.Code, overLimit.Err.Msg)
		body := ctx.Response.Body()
		extra := append([]byte(`,"entityType":`), kv.AppendJSONString(nil, overLimit.EntityType)...)
		extra = strconv.AppendInt(append(extra, `,"limit":`...), overLimit.Limit, 10)
		ctx.Response.SetBody(append(append(append([]byte(nil), body[:len(body)-1]...), extra...), '}'))
	case errors.As(err, &ee):
		writeError(ctx, statusOf(ee.Code), ee.Code, ee.Msg)
	case errors.As(err, &ce):
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, ce.Msg)
	case errors.Is(err, errInflateBusy):
		writeError(ctx, fasthttp.StatusServiceUnavailable, engine.CodeUnavailable, "Too many large compressed bodies are being decompressed at once; retry later")
		ctx.Response.Header.Set("Retry-After", "1") // after writeError, which resets the response
	case errors.Is(err, ingest.ErrOverloaded), errors.Is(err, ingest.ErrSpoolFull), errors.Is(err, ingest.ErrClosed):
		writeError(ctx, fasthttp.StatusServiceUnavailable, engine.CodeUnavailable, err.Error())
		ctx.Response.Header.Set("Retry-After", "1")
	case errors.Is(err, storage.ErrUnavailable):
		s.log.Error("storage unavailable", "requestId", requestID(ctx), "route", route(ctx), "err", err)
		writeError(ctx, fasthttp.StatusServiceUnavailable, engine.CodeUnavailable, "Storage is unavailable, retry later")
		ctx.Response.Header.Set("Retry-After", "1")
	default:
		s.log.Error("request failed", "requestId", requestID(ctx), "method", string(ctx.Method()), "route", route(ctx), "err", err)
		writeError(ctx, fasthttp.StatusInternalServerError, engine.CodeGeneral, "Internal server error")
	}
}

// writeError writes the JSON error body with the given status and code.
func writeError(ctx *fasthttp.RequestCtx, status int, code engine.Code, msg string) {
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	b := ctx.Response.BodyWriter()
	buf := make([]byte, 0, 96+len(msg))
	buf = append(buf, `{"status":`...)
	buf = strconv.AppendInt(buf, int64(status), 10)
	buf = append(buf, `,"message":`...)
	buf = kv.AppendJSONString(buf, msg)
	buf = append(buf, `,"errorCode":`...)
	buf = strconv.AppendInt(buf, int64(code), 10)
	buf = append(buf, `,"timestamp":`...)
	buf = strconv.AppendInt(buf, time.Now().UnixMilli(), 10)
	buf = append(buf, '}')
	b.Write(buf)
}

// logger returns l, or a discarding logger when l is nil.
func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

func itoa(n int) string { return strconv.Itoa(n) }

// route names the matched route pattern (/api/v1/{token}/telemetry), never the
// request path, so a device access token in the path never reaches a log line.
func route(ctx *fasthttp.RequestCtx) string {
	if r, ok := ctx.UserValue(router.MatchedRoutePathParam).(string); ok {
		return r
	}
	return "unmatched"
}
