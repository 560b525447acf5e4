package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// accessClaims are the claims of an access token, named as ThingsBoard's
// JwtTokenFactory names them (compat §7.5). Empty names are left out, as jjwt drops
// null claims.
type accessClaims struct {
	jwt.RegisteredClaims
	UserID     string   `json:"userId"`
	Scopes     []string `json:"scopes"`
	SessionID  string   `json:"sessionId"`
	FirstName  string   `json:"firstName,omitempty"`
	LastName   string   `json:"lastName,omitempty"`
	Enabled    bool     `json:"enabled"`
	IsPublic   bool     `json:"isPublic"`
	TenantID   string   `json:"tenantId"`
	CustomerID string   `json:"customerId"`
}

// refreshClaims are the claims of a refresh token: scopes is always ["REFRESH_TOKEN"].
type refreshClaims struct {
	jwt.RegisteredClaims
	UserID    string   `json:"userId"`
	Scopes    []string `json:"scopes"`
	SessionID string   `json:"sessionId"`
	IsPublic  bool     `json:"isPublic"`
}

var (
	// A token of another scope (an access token) sent for refreshing: ThingsBoard's
	// JwtTokenFactory.parseRefreshToken throws IllegalArgumentException, which
	// its AuthExceptionHandler answers as 500 with code 2 and the message (compat §7.3).
	errRefreshScope    = &Error{Code: CodeGeneral, Msg: "Invalid Refresh Token scope"}
	errRefreshNoScopes = &Error{Code: CodeGeneral, Msg: "Refresh Token doesn't have any scopes"}
	errTokenOutdated   = &Error{Code: CodeAuthentication, Msg: "Token is outdated"}
)

// issueTokens signs a new access and refresh token for u under a new session.
// validFrom is TokensValidFrom of u's credentials (unix seconds): iat is never
// earlier, so tokens issued in the second of a password change, after it, stay
// valid while those issued before it do not (iat has whole seconds only).
func (e *Engine) issueTokens(u *User, enabled bool, validFrom int64) (access, refresh string, err error) {
	now := e.now()
	iat := now
	if now.Unix() < validFrom {
		iat = time.Unix(validFrom, 0)
	}
	session := uuid.NewString()
	ac := accessClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   u.Email,
			Issuer:    e.cfg.Issuer,
			IssuedAt:  jwt.NewNumericDate(iat),
			ExpiresAt: jwt.NewNumericDate(now.Add(e.cfg.AccessTokenTTL)),
		},
		UserID:     u.ID.ID.String(),
		Scopes:     []string{u.Authority},
		SessionID:  session,
		FirstName:  u.FirstName,
		LastName:   u.LastName,
		Enabled:    enabled,
		TenantID:   orNull(u.TenantID.ID).String(),
		CustomerID: orNull(u.CustomerID.ID).String(),
	}
	rc := refreshClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   u.Email,
			Issuer:    e.cfg.Issuer,
			IssuedAt:  jwt.NewNumericDate(iat),
			ExpiresAt: jwt.NewNumericDate(now.Add(e.cfg.RefreshTokenTTL)),
			ID:        uuid.NewString(),
		},
		UserID:    u.ID.ID.String(),
		Scopes:    []string{RefreshScope},
		SessionID: session,
	}
	if access, err = jwt.NewWithClaims(jwt.SigningMethodHS512, ac).SignedString(e.cfg.JWTSigningKey); err != nil {
		return "", "", err
	}
	if refresh, err = jwt.NewWithClaims(jwt.SigningMethodHS512, rc).SignedString(e.cfg.JWTSigningKey); err != nil {
		return "", "", err
	}
	return access, refresh, nil
}

// parseJWT verifies a token signed by this platform and decodes its claims. Only
// HS512 is accepted, whatever the header says.
func (e *Engine) parseJWT(token string, claims jwt.Claims) error {
	p := jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS512.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuer(e.cfg.Issuer),
		jwt.WithTimeFunc(e.now),
	)
	tok, err := p.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		if t.Method != jwt.SigningMethodHS512 {
			return nil, errors.New("unexpected signing method")
		}
		return e.cfg.JWTSigningKey, nil
	})
	if err == nil {
		return nil
	}
	return jwtError(tok, err)
}

// jwtError maps a parse failure as ThingsBoard does (compat §7.5): a bad signature
// or expiry is "Token has expired" (11), anything malformed or unsupported is
// "Invalid username or password" (10).
func jwtError(tok *jwt.Token, err error) error {
	switch {
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		// An algorithm other than HS512 is unsupported rather than badly signed.
		if tok != nil && tok.Method != jwt.SigningMethodHS512 {
			return ErrBadCredentials
		}
		return ErrTokenExpired
	case errors.Is(err, jwt.ErrTokenExpired):
		return ErrTokenExpired
	}
	return ErrBadCredentials
}

// principalFromAccess parses an access token into the caller (see accessSession).
func (e *Engine) principalFromAccess(ctx context.Context, token string) (*Principal, error) {
	p, _, err := e.accessSession(ctx, token)
	return p, err
}

// accessSession parses an access token into the caller and the session the
// token belongs to. A refresh token (or any scope that is not a user authority)
// is refused; so is a token issued before its user's password changed, of a
// session logged out, or whose user is gone ("Token has expired", as
// ThingsBoard's TokenOutdatingService answers), or whose user is disabled.
func (e *Engine) accessSession(ctx context.Context, token string) (*Principal, string, error) {
	var c accessClaims
	if err := e.parseJWT(token, &c); err != nil {
		return nil, "", err
	}
	if len(c.Scopes) != 1 || !slices.Contains([]string{SysAdmin, TenantAdmin, CustomerUser}, c.Scopes[0]) {
		return nil, "", ErrBadCredentials
	}
	if c.IsPublic {
		return nil, "", ErrBadCredentials // Sluice has no public users
	}
	uid, err1 := uuid.Parse(c.UserID)
	tid, err2 := uuid.Parse(c.TenantID)
	cid, err3 := uuid.Parse(c.CustomerID)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, "", ErrBadCredentials
	}
	st, err := e.userState(ctx, uid)
	if err != nil {
		return nil, "", err
	}
	if st.gone || issuedAt(&c.RegisteredClaims) < st.validFrom || revoked(st.revoked, c.SessionID) {
		return nil, "", ErrTokenExpired
	}
	if !st.enabled {
		return nil, "", errUserNotActive
	}
	return &Principal{UserID: uid, TenantID: tid, CustomerID: cid, Authority: c.Scopes[0], Email: c.Subject}, c.SessionID, nil
}

// parseRefresh parses a refresh token and returns its user, issue time and session.
func (e *Engine) parseRefresh(token string) (uid uuid.UUID, iat int64, session string, err error) {
	var c refreshClaims
	if err := e.parseJWT(token, &c); err != nil {
		return uuid.Nil, 0, "", err
	}
	if len(c.Scopes) == 0 {
		return uuid.Nil, 0, "", errRefreshNoScopes
	}
	if !slices.Equal(c.Scopes, []string{RefreshScope}) {
		return uuid.Nil, 0, "", errRefreshScope
	}
	if uid, err = uuid.Parse(c.UserID); err != nil {
		return uuid.Nil, 0, "", ErrBadCredentials
	}
	return uid, issuedAt(&c.RegisteredClaims), c.SessionID, nil
}

// issuedAt is the iat claim in unix seconds; a token without one counts as issued at 0.
func issuedAt(c *jwt.RegisteredClaims) int64 {
	if c.IssuedAt == nil {
		return 0
	}
	return c.IssuedAt.Unix()
}
