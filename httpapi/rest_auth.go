package httpapi

import (
	"bytes"
	"errors"

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
	r.GET("/api/noauth/activate", s.checkActivateToken)
	r.GET("/api/noauth/userPasswordPolicy", s.passwordPolicy)
	r.POST("/api/noauth/resetPasswordByEmail", s.resetPasswordByEmail)
	s.apiKeyRoutes(r)
}

// authed wraps a handler that needs an authenticated caller. The credentials come
// from X-Authorization, or from Authorization when that is blank (compat §7.1):
// "Bearer <jwt>" or "ApiKey <key>".
func (s *Server) authed(h func(ctx *fasthttp.RequestCtx, p *engine.Principal)) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		p, err := s.eng.Authenticate(s.ctx, authHeader(ctx))
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

// authHeader is the credential of a request: X-Authorization, or
// Authorization when that is blank.
func authHeader(ctx *fasthttp.RequestCtx) string {
	header := ctx.Request.Header.Peek("X-Authorization")
	if len(bytes.TrimSpace(header)) == 0 {
		header = ctx.Request.Header.Peek("Authorization")
	}
	return string(header)
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

// logout ends the session of the caller's access token on every node, as
// ThingsBoard outdates it: its access and refresh tokens stop working, the
// user's other sessions go on. With an API key it only answers 200.
func (s *Server) logout(ctx *fasthttp.RequestCtx, _ *engine.Principal) {
	s.done(ctx, s.eng.Logout(s.ctx, authHeader(ctx)))
}

// activateTokenInfo answers GET /api/noauth/activate for a usable token.
type activateTokenInfo struct {
	ActivateToken string `json:"activateToken"`
	Message       string `json:"message"`
}

// checkActivateToken is where the link of GET /api/user/{id}/activationLink
// leads. ThingsBoard answers 303 to its login UI's "create password" page (or
// to /activationLinkExpired) and 409 for an unknown token. Sluice has no login
// UI to send the browser to, so a usable token is 200 with JSON saying how to
// set the password (a redirect would lose the token or land on a page that
// cannot use it), and an unknown, spent or expired one is 409 with the JSON
// error body and the message POST would answer. The token is not spent here.
func (s *Server) checkActivateToken(ctx *fasthttp.RequestCtx) {
	token := string(ctx.QueryArgs().Peek("activateToken"))
	if err := s.eng.CheckActivateToken(s.ctx, token); err != nil {
		var ee *engine.Error
		if errors.As(err, &ee) && ee.Code == engine.CodeBadRequestParams {
			writeError(ctx, fasthttp.StatusConflict, ee.Code, ee.Msg)
			return
		}
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, activateTokenInfo{ActivateToken: token,
		Message: `To activate the account, POST {"activateToken","password"} to /api/noauth/activate`})
}

// passwordPolicy answers ThingsBoard's UserPasswordPolicy with Sluice's limits.
func (s *Server) passwordPolicy(ctx *fasthttp.RequestCtx) {
	s.writeJSON(ctx, engine.UserPasswordPolicy())
}

// resetPasswordByEmail answers 200 whatever the e-mail, as ThingsBoard does so
// as not to tell which users exist, and does nothing else: Sluice sends no
// mail, and a reset token that no mail carries could reach nobody (ThingsBoard
// offers no reset link to an administrator). An administrator sets a
// forgotten password by deleting and re-creating the user, or the user
// changes it while logged in. The body is still read, so a malformed one is
// refused as ThingsBoard refuses it.
func (s *Server) resetPasswordByEmail(ctx *fasthttp.RequestCtx) {
	var req struct {
		Email string `json:"email"`
	}
	s.readJSON(ctx, &req)
}

func methodNotSupported(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusUnauthorized, engine.CodeAuthentication, "Authentication method not supported")
}
