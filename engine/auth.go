package engine

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"

	"github.com/google/uuid"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-iot/sluice/storage"
)

var (
	errUserNotActive = &Error{Code: CodeAuthentication, Msg: "User account is not active"}
	// passay's LengthRule text, as ThingsBoard's default policy answers; the
	// limit is bcrypt's, in bytes (MaxPasswordBytes).
	errPasswordTooLong = Errorf(CodeBadRequestParams, "Password must be no more than %d characters in length.", MaxPasswordBytes)
)

// Login is LoginFrom without a client address: only the per-user failure count applies.
func (e *Engine) Login(ctx context.Context, username, password string) (access, refresh string, err error) {
	return e.LoginFrom(ctx, "", username, password)
}

// LoginFrom checks a user's e-mail and password and issues an access and a refresh
// token (compat §7.2). client is the caller's address for failure counting ("" if
// unknown). Blank input is "Authentication failed"; an unknown user or a wrong
// password is "Invalid username or password", in the same time either way. After
// Config.LoginMaxFailures failures of the user name, or LoginMaxAddressFailures
// from the address, logins are "User account is locked due to security policy"
// for Config.LoginLockout, whatever the password.
func (e *Engine) LoginFrom(ctx context.Context, client, username, password string) (access, refresh string, err error) {
	if strings.TrimSpace(username) == "" || strings.TrimSpace(password) == "" {
		return "", "", ErrAuthFailed
	}
	if ok, err := e.admitLogin(ctx, username, client); err != nil {
		return "", "", err
	} else if !ok {
		return "", "", errAccountLocked
	}
	u, creds, err := e.checkLogin(ctx, username, password)
	if err != nil {
		return "", "", err
	}
	if err := e.loginSucceeded(ctx, username, client); err != nil {
		return "", "", err
	}
	// Checked after the password, so the state of an account is only told to its owner.
	if !creds.Enabled {
		return "", "", errUserNotActive
	}
	return e.issueTokens(u, true, creds.TokensValidFrom)
}

// checkLogin returns the user and credentials of a matching e-mail and password.
func (e *Engine) checkLogin(ctx context.Context, username, password string) (*User, *userCredentials, error) {
	u, err := lookupRecord[User](ctx, e, kindUser, emailKey(strings.TrimSpace(username)))
	if err != nil {
		if !errors.Is(err, storage.ErrNotFound) {
			return nil, nil, err
		}
		e.burnPasswordCheck(password)
		return nil, nil, ErrBadCredentials
	}
	creds, err := getRecord[userCredentials](ctx, e, kindUserCreds, u.ID.ID)
	if err != nil {
		if !errors.Is(err, storage.ErrNotFound) {
			return nil, nil, err
		}
		e.burnPasswordCheck(password)
		return nil, nil, ErrBadCredentials
	}
	if !e.checkPassword(creds.PasswordHash, password) {
		return nil, nil, ErrBadCredentials
	}
	return u, creds, nil
}

// Refresh trades a refresh token for a new token pair with a new session. The user
// is reloaded, so a deleted or disabled user cannot refresh, and a token issued
// before a password change, or of a session logged out, is "Token is outdated"
// (compat §7.3).
func (e *Engine) Refresh(ctx context.Context, refreshToken string) (access, refresh string, err error) {
	if strings.TrimSpace(refreshToken) == "" {
		return "", "", ErrAuthFailed
	}
	uid, iat, session, err := e.parseRefresh(refreshToken)
	if err != nil {
		return "", "", err
	}
	u, err := getRecord[User](ctx, e, kindUser, uid)
	if err != nil {
		return "", "", ifNotFound(err, ErrBadCredentials)
	}
	creds, err := getRecord[userCredentials](ctx, e, kindUserCreds, uid)
	if err != nil {
		return "", "", ifNotFound(err, ErrBadCredentials)
	}
	if iat < creds.TokensValidFrom || revoked(creds.RevokedSessions, session) {
		return "", "", errTokenOutdated
	}
	if !creds.Enabled {
		return "", "", errUserNotActive
	}
	return e.issueTokens(u, true, creds.TokensValidFrom)
}

// Authenticate resolves the raw value of the X-Authorization (or Authorization)
// header into the caller (compat §7.1). "Bearer <jwt>" takes an access token,
// "ApiKey <key>" an API key; the prefixes are case-sensitive. Anything else,
// including an empty header, is "Authentication failed". A JWT is trusted for its
// claims, but the user's state is checked through a node-local cache of
// Config.AuthCacheTTL: tokens issued before a password change, or of a deleted
// user, are refused.
func (e *Engine) Authenticate(ctx context.Context, header string) (*Principal, error) {
	switch {
	case strings.HasPrefix(header, "Bearer "):
		return e.principalFromAccess(ctx, strings.TrimSpace(header[len("Bearer "):]))
	case strings.HasPrefix(header, "ApiKey "):
		return e.principalFromAPIKey(ctx, strings.TrimSpace(header[len("ApiKey "):]))
	}
	return nil, ErrAuthFailed
}

// maxRevokedSessions bounds the logged-out sessions a user's credentials
// remember: past it, a logout outdates every token of the user instead, so a
// client logging in and out in a loop cannot grow the record without end.
const maxRevokedSessions = 1000

// Logout ends the session of the access token in header (the raw
// X-Authorization value, as Authenticate takes it) on every node, as
// ThingsBoard's logout outdates the session: its access token is then "Token
// has expired", its refresh token "Token is outdated"; other sessions of the
// user go on. An API key has no session: its logout only authenticates it.
// The session id is read from the token here because Principal does not carry it.
func (e *Engine) Logout(ctx context.Context, header string) error {
	if !strings.HasPrefix(header, "Bearer ") {
		_, err := e.Authenticate(ctx, header)
		return err
	}
	p, session, err := e.accessSession(ctx, strings.TrimSpace(header[len("Bearer "):]))
	if err != nil || session == "" {
		return err
	}
	return e.updateCreds(ctx, p.UserID, func(c *userCredentials) error {
		now := e.now()
		// No token of the session outlives the longer of the two lifetimes.
		c.revokeSession(session, now.Unix(), now.Add(max(e.cfg.AccessTokenTTL, e.cfg.RefreshTokenTTL)).Unix())
		return nil
	})
}

// revokeSession remembers session as logged out until the unix second until,
// or, with maxRevokedSessions live ones already remembered, outdates every
// token of the user issued so far.
func (c *userCredentials) revokeSession(session string, now, until int64) {
	c.pruneSessions(now)
	if len(c.RevokedSessions) >= maxRevokedSessions {
		c.outdateTokens(now)
		c.RevokedSessions = nil
		return
	}
	if c.RevokedSessions == nil {
		c.RevokedSessions = make(map[string]int64)
	}
	c.RevokedSessions[session] = until
}

// outdateTokens makes every token of the user issued so far outdated. iat has
// whole seconds, so tokens of this second may predate the change: valid ones
// start at the next second (issueTokens never issues earlier), or one second
// past the previous change when that was in this second too, since tokens
// issued after it carry its second.
func (c *userCredentials) outdateTokens(now int64) {
	c.TokensValidFrom = max(now, c.TokensValidFrom) + 1
}

// pruneSessions forgets the revoked sessions whose tokens have all expired.
func (c *userCredentials) pruneSessions(now int64) {
	maps.DeleteFunc(c.RevokedSessions, func(_ string, until int64) bool { return until <= now })
}

// revoked reports whether session was logged out; a token without a session
// cannot be.
func revoked(sessions map[string]int64, session string) bool {
	_, ok := sessions[session]
	return ok && session != ""
}

// updateCreds applies change to a user's stored credentials over the version
// read, reading them again when another change came between (two logouts at
// once must both hold), and then evicts the user on every node.
func (e *Engine) updateCreds(ctx context.Context, userID uuid.UUID, change func(*userCredentials) error) error {
	for range maxReplaceTries {
		c, prev, err := loadRecord[userCredentials](ctx, e, kindUserCreds, userID)
		if err != nil {
			return notFound(err)
		}
		if err := change(c); err != nil {
			return err
		}
		err = e.writeCreds(ctx, c, &prev)
		if errors.Is(err, storage.ErrChanged) {
			continue
		}
		if err != nil {
			return notFound(err)
		}
		e.evictUserEverywhere(userID)
		return nil
	}
	return errChangedMeanwhile
}

// CurrentUser returns the user behind p (GET /api/auth/user).
func (e *Engine) CurrentUser(ctx context.Context, p *Principal) (*User, error) {
	if p == nil {
		return nil, ErrAuthFailed
	}
	u, err := getRecord[User](ctx, e, kindUser, p.UserID)
	if err != nil {
		return nil, notFound(err)
	}
	return u, nil
}

// hashPassword returns the bcrypt hash of password.
func (e *Engine) hashPassword(password string) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(password), e.cfg.BcryptCost)
	if errors.Is(err, bcrypt.ErrPasswordTooLong) {
		return "", errPasswordTooLong
	}
	if err != nil {
		return "", err
	}
	return string(h), nil
}

// checkPassword compares in constant time (bcrypt does); an empty hash (a user not
// activated yet) never matches.
func (e *Engine) checkPassword(hash, password string) bool {
	if hash == "" {
		e.burnPasswordCheck(password)
		return false
	}
	return bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)) == nil
}

// burnPasswordCheck spends the time of one password check, so a login for an
// unknown e-mail cannot be told from a wrong password by its latency.
func (e *Engine) burnPasswordCheck(password string) {
	h := e.dummyHash()
	_ = bcrypt.CompareHashAndPassword(h, []byte(password))
}

var dummyHashes sync.Map // bcrypt cost → hash of a throw-away password

func (e *Engine) dummyHash() []byte {
	if h, ok := dummyHashes.Load(e.cfg.BcryptCost); ok {
		return h.([]byte)
	}
	h, _ := bcrypt.GenerateFromPassword([]byte(randomString(16)), e.cfg.BcryptCost)
	dummyHashes.Store(e.cfg.BcryptCost, h)
	return h
}
