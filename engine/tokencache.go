package engine

import (
	"context"
	"crypto/subtle"
	"errors"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

var errInvalidToken = &Error{Code: CodeAuthentication, Msg: "Invalid access token"}

// DeviceByToken resolves a device access token on the device-API hot path. A hit in
// the node-local cache costs no storage read; a miss reads the credentials and the
// device and caches them for Config.TokenCacheTTL. Changing credentials, updating or
// deleting a device evicts at once, here and (through the notifier) on every node.
// An unknown token is *Error{CodeAuthentication, "Invalid access token"}. The
// returned Device is shared: callers must not modify it.
func (e *Engine) DeviceByToken(ctx context.Context, token string) (*Device, error) {
	if token == "" {
		return nil, errInvalidToken
	}
	now := e.now()
	d, err := e.tokens.get(now, token, func() (*Device, error) {
		creds, err := lookupRecord[DeviceCredentials](ctx, e, kindCredentials, tokenKey(token))
		if err != nil {
			return nil, ifNotFound(err, errInvalidToken)
		}
		if subtle.ConstantTimeCompare([]byte(creds.CredentialsID), []byte(token)) != 1 {
			return nil, errInvalidToken
		}
		d, err := e.loadDevice(ctx, creds.DeviceID.ID)
		if err != nil {
			// Credentials whose device is gone (a half-finished create or delete) are dead.
			return nil, ifNotFound(err, errInvalidToken)
		}
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	e.noteActivity(d.ID.ID, now.UnixMilli()) // a device that shows its token is active
	return d, nil
}

// evictToken forgets a token here and makes every other node drop its token
// cache (the token itself is never published). Call it after the change is in storage.
func (e *Engine) evictToken(token string) {
	e.tokens.evict(token)
	e.publishEviction(evictTokens, "")
}

// clearTokens forgets every cached token on this node.
func (e *Engine) clearTokens() { e.tokens.clear() }

// evictDevice forgets the token of a device whose record changed.
func (e *Engine) evictDevice(ctx context.Context, deviceID uuid.UUID) error {
	creds, err := lookupRecord[DeviceCredentials](ctx, e, kindCredentials, credsDeviceKey(deviceID))
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	e.evictToken(creds.CredentialsID)
	return nil
}
