package engine

import (
	"context"
	"errors"
	"strings"
	"sync"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-iot/sluice/storage"
)

var (
	errUserNotActive   = &Error{Code: CodeAuthentication, Msg: "User account is not active"}
	errPasswordTooLong = Errorf(CodeBadRequestParams, "Password is longer than 72 bytes")
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
// before a password change is "Token is outdated" (compat §7.3).
func (e *Engine) Refresh(ctx context.Context, refreshToken string) (access, refresh string, err error) {
	if strings.TrimSpace(refreshToken) == "" {
		return "", "", ErrAuthFailed
	}
	uid, iat, err := e.parseRefresh(refreshToken)
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
	if iat < creds.TokensValidFrom {
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
