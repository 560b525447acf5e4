package engine

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"sync"
	"time"

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
		e.tokens.hashes.Store(e.tokenHash(token), token) // for evictions published by hash
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	e.noteActivity(d.ID.ID, now.UnixMilli()) // a device that shows its token is active
	return d, nil
}

// CachedDeviceByToken is DeviceByToken from this node's token cache alone:
// the device of a token cached and not expired, else ok = false. It reads no
// storage and records no activity, for counting what a request refused
// before it was handled (a body over the limit) against its device: a token
// it does not know, valid or not, costs nothing. The returned Device is
// shared: callers must not modify it.
func (e *Engine) CachedDeviceByToken(token string) (d *Device, ok bool) {
	return e.tokens.peek(e.now(), token)
}

// tokenCache is the device token cache, with the tokens it holds by their
// hash: another node publishes the hash of a token to evict, never the token.
type tokenCache struct {
	ttlCache[string, *Device]
	hashes sync.Map // tokenHash → token
}

// peek is the cached device of token, if one is and has not expired; it
// loads nothing.
func (c *tokenCache) peek(now time.Time, token string) (*Device, bool) {
	x, ok := c.m.Load(token)
	if !ok {
		return nil, false
	}
	ent := x.(*ttlEntry[*Device])
	if now.UnixNano() >= ent.expires {
		return nil, false
	}
	return ent.v, true
}

// evictHash forgets the token of hash h, if it is cached here. When it is
// not, a load of it may be under way (its hash is noted only at the end of
// the load): the generation moves on all the same, so that no load in
// flight caches what it read.
func (c *tokenCache) evictHash(h string) {
	if token, ok := c.hashes.LoadAndDelete(h); ok {
		c.evict(token.(string))
		return
	}
	c.mu.Lock()
	c.gen.Add(1)
	c.mu.Unlock()
}

// tokenHash names a token in an eviction: HMAC-SHA256 under the JWT signing
// key, which every node of a cluster shares, so that the notifier's traffic
// does not give away even a guessable token.
func (e *Engine) tokenHash(token string) string {
	m := hmac.New(sha256.New, e.cfg.JWTSigningKey)
	m.Write([]byte(token))
	return hex.EncodeToString(m.Sum(nil))
}

// evictToken forgets a token here and on every other node. Call it after the
// change is in storage.
func (e *Engine) evictToken(token string) {
	h := e.tokenHash(token)
	e.tokens.hashes.Delete(h)
	e.tokens.evict(token)
	e.publishEviction(evictTokenHash, h)
}

// clearTokens forgets every cached token on this node.
func (e *Engine) clearTokens() {
	e.tokens.clear()
	e.tokens.hashes.Clear()
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
