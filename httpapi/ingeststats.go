package httpapi

import (
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// getIngestStats serves GET /api/device/{deviceId}/ingestStats.
func (s *Server) getIngestStats(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "deviceId"); ok {
		v, err := s.eng.DeviceIngestStats(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

// rejected counts a telemetry request of the device that was answered with an
// error before its points reached the writer (which counts its own refusals).
func (s *Server) rejected(ctx *fasthttp.RequestCtx, deviceID uuid.UUID) {
	reason := engine.RejectInvalid
	switch ctx.Response.StatusCode() {
	case fasthttp.StatusRequestEntityTooLarge:
		reason = engine.RejectTooLarge
	case fasthttp.StatusUnsupportedMediaType:
		reason = engine.RejectUnsupported
	case fasthttp.StatusTooManyRequests:
		reason = engine.RejectRateLimited
	}
	s.cfg.IngestStats.RejectedRequest(deviceID, reason)
}
