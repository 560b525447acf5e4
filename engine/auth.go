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

// Login checks a user's e-mail and password and issues an access and a refresh
// token (compat §7.2). Blank input is "Authentication failed"; an unknown user or a
// wrong password is "Invalid username or password", in the same time either way.
func (e *Engine) Login(ctx context.Context, username, password string) (access, refresh string, err error) {
	if strings.TrimSpace(username) == "" || strings.TrimSpace(password) == "" {
		return "", "", ErrAuthFailed
	}
	u, err := lookupRecord[User](ctx, e, kindUser, emailKey(strings.TrimSpace(username)))
	if err != nil {
		if !errors.Is(err, storage.ErrNotFound) {
			return "", "", err
		}
		e.burnPasswordCheck(password)
		return "", "", ErrBadCredentials
	}
	creds, err := getRecord[userCredentials](ctx, e, kindUserCreds, u.ID.ID)
	if err != nil {
		if !errors.Is(err, storage.ErrNotFound) {
			return "", "", err
		}
		e.burnPasswordCheck(password)
		return "", "", ErrBadCredentials
	}
	if !e.checkPassword(creds.PasswordHash, password) {
		return "", "", ErrBadCredentials
	}
	// Checked after the password, so the state of an account is only told to its owner.
	if !creds.Enabled {
		return "", "", errUserNotActive
	}
	return e.issueTokens(u, creds.Enabled)
}

// Refresh trades a refresh token for a new token pair with a new session. The user
// is reloaded, so a deleted or disabled user cannot refresh (compat §7.3).
func (e *Engine) Refresh(ctx context.Context, refreshToken string) (access, refresh string, err error) {
	if strings.TrimSpace(refreshToken) == "" {
		return "", "", ErrAuthFailed
	}
	uid, err := e.userIDFromRefresh(refreshToken)
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
	if !creds.Enabled {
		return "", "", errUserNotActive
	}
	return e.issueTokens(u, true)
}

// Authenticate resolves the raw value of the X-Authorization (or Authorization)
// header into the caller. "Bearer <jwt>" takes an access token; "ApiKey <key>" is
// not supported yet and is refused as an unknown key would be; anything else,
// including an empty header, is "Authentication failed". Like ThingsBoard it trusts
// the claims of a valid token and does not reload the user.
func (e *Engine) Authenticate(ctx context.Context, header string) (*Principal, error) {
	switch {
	case strings.HasPrefix(header, "Bearer "):
		return e.principalFromAccess(strings.TrimSpace(header[len("Bearer "):]))
	case strings.HasPrefix(header, "ApiKey "):
		return nil, ErrBadCredentials
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
