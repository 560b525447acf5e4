package httpapi

import (
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// allowDevice counts a device-API request against the tenant profile's limits
// (engine.AllowDevice); dataPoints > 0 for telemetry and attribute writes. A
// refused request is answered 429 with Retry-After.
func (s *Server) allowDevice(ctx *fasthttp.RequestCtx, dev *engine.Device, dataPoints int) bool {
	if err := s.eng.AllowDevice(s.ctx, dev, dataPoints); err != nil {
		s.fail(ctx, err)
		return false
	}
	return true
}

// mayWrite refuses a telemetry or attributes write before its body is
// decompressed and parsed when the device's or tenant's write limits have no
// room left (engine.MayWrite), so a device over its limit costs little.
func (s *Server) mayWrite(ctx *fasthttp.RequestCtx, dev *engine.Device) bool {
	if err := s.eng.MayWrite(s.ctx, dev); err != nil {
		s.fail(ctx, err)
		return false
	}
	return true
}

// allowREST counts a REST request of p against its tenant's (and customer's)
// REST limits; a refused request is answered 429, code 33, with Retry-After.
func (s *Server) allowREST(ctx *fasthttp.RequestCtx, p *engine.Principal) bool {
	if err := s.eng.AllowREST(s.ctx, p); err != nil {
		s.fail(ctx, err)
		return false
	}
	return true
}

// setRetryAfter adds Retry-After to the answer of a refused request: whole
// seconds until the request would pass, at least 1. fail calls it after writing
// the error body (which resets the headers).
func setRetryAfter(ctx *fasthttp.RequestCtx, err error) {
	var le *engine.LimitError
	if !errors.As(err, &le) {
		return
	}
	ctx.Response.Header.Set("Retry-After", strconv.FormatInt(retryAfterSeconds(le.RetryAfter), 10))
}

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	return max(1, int64((d+time.Second-1)/time.Second))
}
