package engine

import (
	"context"
	"crypto/subtle"
	"errors"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

var errInvalidToken = &Error{Code: CodeAuthentication, Msg: "Invalid access token"}

// tokenEntry is one cached token → device resolution.
type tokenEntry struct {
	dev     *Device
	expires int64 // unix nanoseconds
}

// DeviceByToken resolves a device access token on the device-API hot path. A hit in
// the node-local cache costs no storage read; a miss reads the credentials and the
// device and caches them for Config.TokenCacheTTL. Changing credentials, updating or
// deleting a device on this node evicts at once. An unknown token is
// *Error{CodeAuthentication, "Invalid access token"}. The returned Device is shared:
// callers must not modify it.
func (e *Engine) DeviceByToken(ctx context.Context, token string) (*Device, error) {
	if token == "" {
		return nil, errInvalidToken
	}
	if v, ok := e.tokens.Load(token); ok {
		if ent := v.(*tokenEntry); e.now().UnixNano() < ent.expires {
			return ent.dev, nil
		}
	}
	gen := e.tokenGen.Load()
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
	// Cache only if no eviction ran while we read storage: what we read may predate
	// that change. Under tokenMu an eviction either comes first (we skip) or after
	// (it deletes our entry), so a changed token is never served again.
	e.tokenMu.Lock()
	if e.tokenGen.Load() == gen {
		e.tokens.Store(token, &tokenEntry{dev: d, expires: e.now().Add(e.cfg.TokenCacheTTL).UnixNano()})
	}
	e.tokenMu.Unlock()
	return d, nil
}

// evictToken forgets a token here and makes every other node drop its token
// cache (the token itself is never published). Call it after the change is in storage.
func (e *Engine) evictToken(token string) {
	e.tokenMu.Lock()
	e.tokenGen.Add(1)
	e.tokens.Delete(token)
	e.tokenMu.Unlock()
	e.publishEviction(evictTokens, "")
}

// clearTokens forgets every cached token on this node.
func (e *Engine) clearTokens() {
	e.tokenMu.Lock()
	e.tokenGen.Add(1)
	e.tokens.Clear()
	e.tokenMu.Unlock()
}

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
