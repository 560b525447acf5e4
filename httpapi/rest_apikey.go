package httpapi

import (
	"github.com/bytedance/sonic"
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// apiKeyRoutes registers API key management (compat §7.7).
func (s *Server) apiKeyRoutes(r *router.Router) {
	r.POST("/api/apiKey", s.authed(s.saveAPIKey))
	r.GET("/api/apiKeys/{userId}", s.authed(s.apiKeys))
	r.PUT("/api/apiKey/{id}/description", s.authed(s.setAPIKeyDescription))
	r.PUT("/api/apiKey/{id}/enabled/{enabled}", s.authed(s.setAPIKeyEnabled))
	r.DELETE("/api/apiKey/{id}", s.authed(s.deleteAPIKey))
}

func (s *Server) saveAPIKey(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	var k engine.APIKeyRequest
	if s.readJSON(ctx, &k) {
		v, err := s.eng.SaveAPIKey(s.ctx, p, &k)
		s.respond(ctx, v, err)
	}
}

func (s *Server) apiKeys(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "userId")
	if !ok {
		return
	}
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListAPIKeys(s.ctx, p, id, pl)
		s.respond(ctx, v, err)
	}
}

// setAPIKeyDescription takes the description as the raw body, as ThingsBoard's
// String body does; a body that is a JSON string literal is unquoted. The body
// may be compressed, as every other REST body may.
func (s *Server) setAPIKeyDescription(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "id")
	if !ok {
		return
	}
	s.withBody(ctx, s.maxBodySize(), func(body []byte) {
		desc := string(body)
		var quoted string
		if len(desc) > 1 && desc[0] == '"' && sonic.UnmarshalString(desc, &quoted) == nil {
			desc = quoted
		}
		v, err := s.eng.SetAPIKeyDescription(s.ctx, p, id, desc)
		s.respond(ctx, v, err)
	})
}

func (s *Server) setAPIKeyEnabled(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "id")
	if !ok {
		return
	}
	var enabled bool
	switch raw := pathParam(ctx, "enabled"); raw {
	case "true":
		enabled = true
	case "false":
	default:
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
			"Failed to convert value of type 'java.lang.String' to required type 'boolean'; Invalid boolean value ["+raw+"]")
		return
	}
	v, err := s.eng.SetAPIKeyEnabled(s.ctx, p, id, enabled)
	s.respond(ctx, v, err)
}

func (s *Server) deleteAPIKey(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "id"); ok {
		s.done(ctx, s.eng.DeleteAPIKey(s.ctx, p, id))
	}
}
