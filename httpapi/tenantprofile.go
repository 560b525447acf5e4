package httpapi

import (
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// tenantProfileRoutes registers the tenant profile REST paths (system
// administrators): the profiles hold the tenants' rate limits (compat §9).
func (s *Server) tenantProfileRoutes(r *router.Router) {
	r.GET("/api/tenantProfiles", s.authed(pageOrIDs(s, s.tenantProfiles, "ids", s.eng.TenantProfilesByIDs)))
	r.GET("/api/tenantProfiles/list", s.authed(byIDs(s, "ids", s.eng.TenantProfilesByIDs)))
	r.GET("/api/tenantProfileInfos", s.authed(s.tenantProfileInfos))
	r.GET("/api/tenantProfileInfo/{tenantProfileId}", s.authed(s.tenantProfileInfo))
	r.POST("/api/tenantProfile/{tenantProfileId}/default", s.authed(s.setDefaultTenantProfile))
	r.GET("/api/tenantProfile/{tenantProfileId}", s.authed(s.getTenantProfile))
	r.POST("/api/tenantProfile", s.authed(s.saveTenantProfile))
	r.DELETE("/api/tenantProfile/{tenantProfileId}", s.authed(s.deleteTenantProfile))
	r.GET("/api/tenantProfileInfo/default", s.authed(s.defaultTenantProfileInfo))
}

func (s *Server) tenantProfiles(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListTenantProfiles(s.ctx, p, pl)
		s.respond(ctx, v, err)
	}
}

func (s *Server) getTenantProfile(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "tenantProfileId"); ok {
		v, err := s.eng.GetTenantProfile(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) saveTenantProfile(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	var tp engine.TenantProfile
	if s.readJSON(ctx, &tp) {
		v, err := s.eng.SaveTenantProfile(s.ctx, p, &tp)
		s.respond(ctx, v, err)
	}
}

func (s *Server) deleteTenantProfile(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "tenantProfileId"); ok {
		s.done(ctx, s.eng.DeleteTenantProfile(s.ctx, p, id))
	}
}

func (s *Server) defaultTenantProfileInfo(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	v, err := s.eng.DefaultTenantProfileInfo(s.ctx, p)
	s.respond(ctx, v, err)
}

func (s *Server) tenantProfileInfos(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListTenantProfileInfos(s.ctx, p, pl)
		s.respond(ctx, v, err)
	}
}

func (s *Server) tenantProfileInfo(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "tenantProfileId"); ok {
		v, err := s.eng.GetTenantProfileInfo(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) setDefaultTenantProfile(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "tenantProfileId"); ok {
		v, err := s.eng.SetDefaultTenantProfile(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}
