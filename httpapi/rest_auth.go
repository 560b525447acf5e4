package httpapi

import (
	"bytes"

	"github.com/bytedance/sonic"
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// authRoutes registers login, token refresh, current user and logout (compat §7.2–7.4).
func (s *Server) authRoutes(r *router.Router) {
	r.POST("/api/auth/login", s.login)
	r.GET("/api/auth/login", methodNotSupported)
	r.POST("/api/auth/token", s.refreshToken)
	r.GET("/api/auth/user", s.authed(s.currentUser))
	r.POST("/api/auth/logout", s.authed(s.logout))
}

// authed wraps a handler that needs a logged-in caller. The credentials come from
// X-Authorization, or from Authorization when that is blank (compat §7.1).
func (s *Server) authed(h func(ctx *fasthttp.RequestCtx, p *engine.Principal)) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		header := ctx.Request.Header.Peek("X-Authorization")
		if len(bytes.TrimSpace(header)) == 0 {
			header = ctx.Request.Header.Peek("Authorization")
		}
		p, err := s.eng.Authenticate(ctx, string(header))
		if err != nil {
			s.fail(ctx, err)
			return
		}
		h(ctx, p)
	}
}

type loginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// login answers {"token","refreshToken"}; a body that does not parse is
// "Authentication failed" (401), as ThingsBoard's login filter answers.
func (s *Server) login(ctx *fasthttp.RequestCtx) {
	var req loginRequest
	if err := sonic.Unmarshal(ctx.PostBody(), &req); err != nil {
		s.fail(ctx, engine.ErrAuthFailed)
		return
	}
	access, refresh, err := s.eng.Login(ctx, req.Username, req.Password)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, engine.JWTPair{Token: access, RefreshToken: refresh})
}

func (s *Server) refreshToken(ctx *fasthttp.RequestCtx) {
	var req struct {
		RefreshToken string `json:"refreshToken"`
	}
	if err := sonic.Unmarshal(ctx.PostBody(), &req); err != nil {
		s.fail(ctx, engine.ErrAuthFailed)
		return
	}
	access, refresh, err := s.eng.Refresh(ctx, req.RefreshToken)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, engine.JWTPair{Token: access, RefreshToken: refresh})
}

func (s *Server) currentUser(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	u, err := s.eng.CurrentUser(ctx, p)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, u)
}

// logout only answers 200: ThingsBoard keeps no server-side session either.
func (s *Server) logout(ctx *fasthttp.RequestCtx, _ *engine.Principal) {}

func methodNotSupported(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusUnauthorized, engine.CodeAuthentication, "Authentication method not supported")
}
