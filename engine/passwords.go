package engine

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// MinPasswordLength is the shortest password accepted, in characters, and
// MaxPasswordBytes the longest, in bytes of UTF-8: bcrypt reads no further
// (ThingsBoard's default policy says 6 and 72 characters).
const (
	MinPasswordLength = 6
	MaxPasswordBytes  = 72
)

var (
	// passay's LengthRule text, as ThingsBoard's default policy answers.
	errPasswordTooShort    = Errorf(CodeBadRequestParams, "Password must be %d or more characters in length.", MinPasswordLength)
	errCurrentPassword     = &Error{Code: CodeBadRequestParams, Msg: "Current password doesn't match!"}
	errSamePassword        = &Error{Code: CodeBadRequestParams, Msg: "New password should be different from existing!"}
	errAlreadyActivated    = &Error{Code: CodeBadRequestParams, Msg: "User is already activated!"}
	errActivateTokenBad    = &Error{Code: CodeBadRequestParams, Msg: "Unable to find user credentials by activateToken"}
	errActivateTokenExpire = &Error{Code: CodeBadRequestParams, Msg: "Activation token expired"}
)

// sha256Hex is the hex SHA-256 of a secret, the only form in which activation
// tokens and API keys are stored.
func sha256Hex(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// checkNewPassword applies the password policy (UserPasswordPolicy). A password of
// blanks only counts as too short.
func checkNewPassword(pw string) error {
	if len([]rune(pw)) < MinPasswordLength || strings.TrimSpace(pw) == "" {
		return errPasswordTooShort
	}
	if len(pw) > MaxPasswordBytes {
		return errPasswordTooLong
	}
	return nil
}

// PasswordPolicy is ThingsBoard's UserPasswordPolicy (GET
// /api/noauth/userPasswordPolicy), which clients read to check a password
// before sending it. Fields Sluice does not enforce are null, as in
// ThingsBoard's default policy.
type PasswordPolicy struct {
	MinimumLength                      int  `json:"minimumLength"`
	MaximumLength                      int  `json:"maximumLength"`
	MinimumUppercaseLetters            *int `json:"minimumUppercaseLetters"`
	MinimumLowercaseLetters            *int `json:"minimumLowercaseLetters"`
	MinimumDigits                      *int `json:"minimumDigits"`
	MinimumSpecialCharacters           *int `json:"minimumSpecialCharacters"`
	AllowWhitespaces                   bool `json:"allowWhitespaces"`
	ForceUserToResetPasswordIfNotValid bool `json:"forceUserToResetPasswordIfNotValid"`
	PasswordExpirationPeriodDays       *int `json:"passwordExpirationPeriodDays"`
	PasswordReuseFrequencyDays         *int `json:"passwordReuseFrequencyDays"`
}

// UserPasswordPolicy returns the policy checkNewPassword applies. The maximum
// is in bytes (bcrypt's limit), where ThingsBoard counts characters: the same
// for ASCII, fewer characters for others.
func UserPasswordPolicy() PasswordPolicy {
	return PasswordPolicy{MinimumLength: MinPasswordLength, MaximumLength: MaxPasswordBytes, AllowWhitespaces: true}
}

// putCreds stores user credentials with the hash of a pending activation token as
// their unique value.
func (e *Engine) putCreds(ctx context.Context, c *userCredentials) error {
	return e.writeCreds(ctx, c, nil)
}

// writeCreds stores c: with Put, or over the version read as *prev (Replace):
// storage.ErrChanged when another change came between (a second use of one
// activation link, a link regenerated as the account was activated, two
// password changes at once), storage.ErrNotFound when the user was deleted.
func (e *Engine) writeCreds(ctx context.Context, c *userCredentials, prev *[]byte) error {
	c.pruneSessions(e.now().Unix())
	var unique []string
	if c.ActivateTokenHash != "" {
		unique = append(unique, activateTokenKey(c.ActivateTokenHash))
	}
	return e.writeRecord(ctx, kindUserCreds, c.UserID, c.TenantID, prev, c, unique)
}

// ChangePassword replaces the caller's password after checking the current one
// and returns a new token pair. Every JWT of the user issued before the change is
// refused from then on ("Token has expired"; refresh: "Token is outdated") — at
// once on this node, within Config.AuthCacheTTL on others. Wrong current passwords
// count towards the login lockout.
func (e *Engine) ChangePassword(ctx context.Context, p *Principal, current, next string) (access, refresh string, err error) {
	if p == nil {
		return "", "", ErrAuthFailed
	}
	u, err := getRecord[User](ctx, e, kindUser, p.UserID)
	if err != nil {
		return "", "", notFound(err)
	}
	creds, prev, err := loadRecord[userCredentials](ctx, e, kindUserCreds, p.UserID)
	if err != nil {
		return "", "", notFound(err)
	}
	if ok, err := e.admitLogin(ctx, u.Email, ""); err != nil {
		return "", "", err
	} else if !ok {
		return "", "", errAccountLocked
	}
	if !e.checkPassword(creds.PasswordHash, current) {
		return "", "", errCurrentPassword
	}
	if err := e.loginSucceeded(ctx, u.Email, ""); err != nil {
		return "", "", err
	}
	if current == next {
		return "", "", errSamePassword
	}
	if err := checkNewPassword(next); err != nil {
		return "", "", err
	}
	if creds.PasswordHash, err = e.hashPassword(next); err != nil {
		return "", "", err
	}
	creds.outdateTokens(e.now().Unix())
	if err := e.writeCreds(ctx, creds, &prev); err != nil {
		return "", "", changedOrGone(err)
	}
	e.evictUserEverywhere(p.UserID)
	return e.issueTokens(u, true, creds.TokensValidFrom)
}

// ActivationToken issues a new activation token for a user p manages who has not
// activated the account yet; an earlier token stops working. The token is
// returned only here: storage keeps its SHA-256. It works once, for Config.ActivationTTL.
func (e *Engine) ActivationToken(ctx context.Context, p *Principal, userID uuid.UUID) (string, error) {
	if err := requireRole(p, SysAdmin, TenantAdmin); err != nil {
		return "", err
	}
	u, err := getRecord[User](ctx, e, kindUser, userID)
	if err != nil {
		return "", notFound(err)
	}
	if !canManageUser(p, u) {
		return "", ErrPermissionDenied
	}
	creds, data, err := loadRecord[userCredentials](ctx, e, kindUserCreds, userID)
	prev := &data
	if errors.Is(err, storage.ErrNotFound) { // an interrupted create
		creds, prev, err = &userCredentials{UserID: userID, TenantID: orNull(u.TenantID.ID)}, nil, nil
	}
	if err != nil {
		return "", err
	}
	// The password tells: an administrator may have enabled (or disabled) a
	// user not activated yet (SetUserCredentialsEnabled).
	if creds.PasswordHash != "" {
		return "", errAlreadyActivated
	}
	token := randomString(32)
	creds.ActivateTokenHash = sha256Hex(token)
	creds.ActivateExpires = e.now().Add(e.cfg.ActivationTTL).UnixMilli()
	// Over the version read: an activation that finished meanwhile is not
	// undone (its password wiped, the account disabled again).
	if err := e.writeCreds(ctx, creds, prev); err != nil {
		return "", changedOrGone(err)
	}
	return token, nil
}

// Activate sets the first password of the user an activation token belongs to,
// enables the account, spends the token and returns a token pair.
func (e *Engine) Activate(ctx context.Context, token, password string) (access, refresh string, err error) {
	creds, prev, err := e.activateCreds(ctx, token)
	if err != nil {
		return "", "", err
	}
	if err := checkNewPassword(password); err != nil {
		return "", "", err
	}
	u, err := getRecord[User](ctx, e, kindUser, creds.UserID)
	if err != nil {
		return "", "", ifNotFound(err, errActivateTokenBad)
	}
	if creds.PasswordHash, err = e.hashPassword(password); err != nil {
		return "", "", err
	}
	creds.Enabled, creds.ActivateTokenHash, creds.ActivateExpires = true, "", 0
	// Over the version read: of two uses of one link at once, one activates and
	// the other finds the token spent.
	err = e.writeCreds(ctx, creds, &prev)
	if errors.Is(err, storage.ErrChanged) || errors.Is(err, storage.ErrNotFound) {
		return "", "", errActivateTokenBad
	}
	if err != nil {
		return "", "", err
	}
	e.evictUserEverywhere(u.ID.ID)
	return e.issueTokens(u, true, creds.TokensValidFrom)
}

// CheckActivateToken tells whether an activation token still works (GET
// /api/noauth/activate), without spending it: nil, or the error Activate
// would answer ("Unable to find user credentials by activateToken" for an
// unknown or spent token, "Activation token expired").
func (e *Engine) CheckActivateToken(ctx context.Context, token string) error {
	_, _, err := e.activateCreds(ctx, token)
	return err
}

// errActivateDisabled answers the activation link of a user an administrator
// disabled before it was used.
var errActivateDisabled = &Error{Code: CodeBadRequestParams, Msg: "User account is disabled; an administrator must enable it first"}

// activateCreds loads the credentials an unexpired activation token belongs to.
func (e *Engine) activateCreds(ctx context.Context, token string) (*userCredentials, []byte, error) {
	if token == "" {
		return nil, nil, errActivateTokenBad
	}
	h := sha256Hex(token)
	creds, prev, err := lookupLoad[userCredentials](ctx, e, kindUserCreds, activateTokenKey(h))
	if err != nil {
		return nil, nil, ifNotFound(err, errActivateTokenBad)
	}
	if subtle.ConstantTimeCompare([]byte(creds.ActivateTokenHash), []byte(h)) != 1 {
		return nil, nil, errActivateTokenBad
	}
	if e.now().UnixMilli() >= creds.ActivateExpires {
		return nil, nil, errActivateTokenExpire
	}
	if creds.Disabled {
		return nil, nil, errActivateDisabled
	}
	return creds, prev, nil
}
