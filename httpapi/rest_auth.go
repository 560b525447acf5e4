package httpapi

import (
	"bytes"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// authRoutes registers login, token refresh, current user, logout, password
// change and activation (compat §7.2–7.4), and the API key routes.
func (s *Server) authRoutes(r *router.Router) {
	r.POST("/api/auth/login", s.login)
	r.POST("/api/auth/token", s.refreshToken)
	// ThingsBoard's login and refresh filters answer 401 for any method but POST.
	for _, m := range []string{fasthttp.MethodGet, fasthttp.MethodPut, fasthttp.MethodDelete, fasthttp.MethodPatch} {
		r.Handle(m, "/api/auth/login", methodNotSupported)
		r.Handle(m, "/api/auth/token", methodNotSupported)
	}
	r.GET("/api/auth/user", s.authed(s.currentUser))
	r.POST("/api/auth/logout", s.authed(s.logout))
	r.POST("/api/auth/changePassword", s.authed(s.changePassword))
	r.POST("/api/noauth/activate", s.activate)
	s.apiKeyRoutes(r)
}

// authed wraps a handler that needs an authenticated caller. The credentials come
// from X-Authorization, or from Authorization when that is blank (compat §7.1):
// "Bearer <jwt>" or "ApiKey <key>".
func (s *Server) authed(h func(ctx *fasthttp.RequestCtx, p *engine.Principal)) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		header := ctx.Request.Header.Peek("X-Authorization")
		if len(bytes.TrimSpace(header)) == 0 {
			header = ctx.Request.Header.Peek("Authorization")
		}
		p, err := s.eng.Authenticate(s.ctx, string(header))
		if err != nil {
			// The reason only: never the header, which holds the credential.
			s.log.Debug("authentication refused", "route", route(ctx), "client", s.clientAddr(ctx), "reason", err.Error())
			s.fail(ctx, err)
			return
		}
		if !s.allowREST(ctx, p) {
			return
		}
		h(ctx, p)
	}
}

type loginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// maxCredentialsBody bounds the login and refresh bodies, which anyone may
// send: a compressed one stops inflating here.
const maxCredentialsBody = 64 << 10

// login answers {"token","refreshToken"}; a body that does not parse is
// "Authentication failed" (401), as ThingsBoard's login filter answers.
func (s *Server) login(ctx *fasthttp.RequestCtx) {
	var req loginRequest
	if !s.decodeBody(ctx, maxCredentialsBody, &req, func(error) { s.fail(ctx, engine.ErrAuthFailed) }) {
		return
	}
	client := s.clientAddr(ctx)
	access, refresh, err := s.eng.LoginFrom(s.ctx, client, req.Username, req.Password)
	if err != nil {
		s.log.Info("login refused", "requestId", requestID(ctx), "client", client, "reason", err.Error())
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, engine.JWTPair{Token: access, RefreshToken: refresh})
}

func (s *Server) refreshToken(ctx *fasthttp.RequestCtx) {
	var req struct {
		RefreshToken string `json:"refreshToken"`
	}
	if !s.decodeBody(ctx, maxCredentialsBody, &req, func(error) { s.fail(ctx, engine.ErrAuthFailed) }) {
		return
	}
	access, refresh, err := s.eng.Refresh(s.ctx, req.RefreshToken)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, engine.JWTPair{Token: access, RefreshToken: refresh})
}

func (s *Server) currentUser(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	u, err := s.eng.CurrentUser(s.ctx, p)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, u)
}

type changePasswordRequest struct {
	CurrentPassword string `json:"currentPassword"`
	NewPassword     string `json:"newPassword"`
}

// changePassword answers a new token pair; older tokens of the user stop working.
func (s *Server) changePassword(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	var req changePasswordRequest
	if s.readJSON(ctx, &req) {
		access, refresh, err := s.eng.ChangePassword(s.ctx, p, req.CurrentPassword, req.NewPassword)
		s.respondPair(ctx, access, refresh, err)
	}
}

type activateRequest struct {
	ActivateToken string `json:"activateToken"`
	Password      string `json:"password"`
}

// activate sets the first password with an activation token and answers a token pair.
func (s *Server) activate(ctx *fasthttp.RequestCtx) {
	var req activateRequest
	if s.readJSON(ctx, &req) {
		access, refresh, err := s.eng.Activate(s.ctx, req.ActivateToken, req.Password)
		s.respondPair(ctx, access, refresh, err)
	}
}

func (s *Server) respondPair(ctx *fasthttp.RequestCtx, access, refresh string, err error) {
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, engine.JWTPair{Token: access, RefreshToken: refresh})
}

// logout only answers 200: ThingsBoard keeps no server-side session either.
func (s *Server) logout(ctx *fasthttp.RequestCtx, _ *engine.Principal) {}

func methodNotSupported(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusUnauthorized, engine.CodeAuthentication, "Authentication method not supported")
}
