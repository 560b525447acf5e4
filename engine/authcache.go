package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// ttlCache is a node-local cache whose entries live for ttl. evict must be called
// after the change is in storage; a load racing with an eviction does not cache
// what it read, so a changed value is never served again on this node. Hits take
// no lock.
type ttlCache[K comparable, V any] struct {
	ttl time.Duration
	m   sync.Map // K → *ttlEntry[V]
	gen atomic.Uint64
	mu  sync.Mutex
}

type ttlEntry[V any] struct {
	v       V
	expires int64 // unix nanoseconds
}

// get returns the cached value of k, or calls load and caches its result. Errors
// are not cached.
func (c *ttlCache[K, V]) get(now time.Time, k K, load func() (V, error)) (V, error) {
	if x, ok := c.m.Load(k); ok {
		if ent := x.(*ttlEntry[V]); now.UnixNano() < ent.expires {
			return ent.v, nil
		}
	}
	gen := c.gen.Load()
	v, err := load()
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	if c.gen.Load() == gen {
		c.m.Store(k, &ttlEntry[V]{v: v, expires: now.Add(c.ttl).UnixNano()})
	}
	c.mu.Unlock()
	return v, nil
}

// clear forgets every entry.
func (c *ttlCache[K, V]) clear() {
	c.mu.Lock()
	c.gen.Add(1)
	c.m.Clear()
	c.mu.Unlock()
}

// evict forgets k.
func (c *ttlCache[K, V]) evict(k K) {
	c.mu.Lock()
	c.gen.Add(1)
	c.m.Delete(k)
	c.mu.Unlock()
}

// userState is what REST authentication needs to know about a user on every
// request: whether it still exists and may log in, since when its tokens are
// valid, and who it is.
type userState struct {
	gone    bool
	enabled bool
	// validFrom is TokensValidFrom of the credentials: JWTs issued earlier are outdated.
	validFrom int64
	// revoked is RevokedSessions of the credentials: JWTs of these sessions are
	// outdated. Read only: a logout writes a new record and evicts this state.
	revoked   map[string]int64
	principal Principal
}

// userState returns the cached state of a user; a deleted user is a state with gone set.
func (e *Engine) userState(ctx context.Context, id uuid.UUID) (*userState, error) {
	return e.users.get(e.now(), id, func() (*userState, error) {
		u, err := getRecord[User](ctx, e, kindUser, id)
		if errors.Is(err, storage.ErrNotFound) {
			return &userState{gone: true}, nil
		}
		if err != nil {
			return nil, err
		}
		st := &userState{principal: principalOf(u)}
		creds, err := getRecord[userCredentials](ctx, e, kindUserCreds, id)
		switch {
		case err == nil:
			st.enabled, st.validFrom, st.revoked = creds.Enabled, creds.TokensValidFrom, creds.RevokedSessions
		case !errors.Is(err, storage.ErrNotFound): // no credentials: cannot authenticate
			return nil, err
		}
		return st, nil
	})
}

// principalOf is the caller a user is once authenticated.
func principalOf(u *User) Principal {
	return Principal{UserID: u.ID.ID, TenantID: orNull(u.TenantID.ID), CustomerID: orNull(u.CustomerID.ID),
		Authority: u.Authority, Email: u.Email}
}
