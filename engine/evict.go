package engine

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Cache eviction across nodes. Every node caches tokens, users and API keys for a
// short TTL; a change on one node evicts there at once and is published on the
// notifier so every other node evicts too (well within a second). The messages
// carry no secret: a user id, an API key's SHA-256, a device token's HMAC.
const evictTopic = "engine:evict"

const (
	evictTokens    = 't' // every device token: what older nodes publish for one (a rolling upgrade)
	evictTokenHash = 'h' // one device token, by tokenHash
	evictUser      = 'u' // one user id
	evictAPIKey    = 'k' // one API key hash
)

// subscribeEvictions makes remote changes evict here. A reset of the subscription
// (messages may have been lost) drops every cache.
func (e *Engine) subscribeEvictions() {
	e.cfg.Notifier.Subscribe(evictTopic, e.onEvict)
}

func (e *Engine) onEvict(msg []byte) {
	if len(msg) == 0 {
		return
	}
	key := string(msg[1:])
	switch msg[0] {
	case evictTokens:
		e.clearTokens()
	case evictTokenHash:
		e.tokens.evictHash(key)
	case evictUser:
		if id, err := uuid.Parse(key); err == nil {
			e.users.evict(id)
		}
	case evictAPIKey:
		e.apiKeys.evict(key)
	}
}

// DropCaches forgets every cached token, user and API key; the node calls it when
// its notification subscription was interrupted.
func (e *Engine) DropCaches() {
	e.clearTokens()
	e.users.clear()
	e.apiKeys.clear()
	e.limits.tenants.clear()
	e.resync.fire()
}

// resync wakes the waits that rely on notifications (RPC polls and calls) when
// some may have been lost: each looks again at what it waits for.
type resync struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next fire.
func (r *resync) wait() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	return r.ch
}

func (r *resync) fire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch != nil {
		close(r.ch)
		r.ch = nil
	}
}

func (e *Engine) publishEviction(kind byte, key string) {
	// Best effort: if the bus is down the other nodes' TTL still bounds staleness.
	if err := e.cfg.Notifier.Publish(context.Background(), evictTopic, append([]byte{kind}, key...)); err != nil {
		e.cfg.Logger.Warn("cannot publish a cache eviction; other nodes rely on their cache TTL", "err", err)
	}
}

// evictUserEverywhere forgets a user's cached state on every node.
func (e *Engine) evictUserEverywhere(id uuid.UUID) {
	e.users.evict(id)
	e.publishEviction(evictUser, id.String())
}

// evictAPIKeyEverywhere forgets a cached API key on every node.
func (e *Engine) evictAPIKeyEverywhere(hash string) {
	e.apiKeys.evict(hash)
	e.publishEviction(evictAPIKey, hash)
}

// resyncSpread spreads the looks of the waits a resync wakes: every long poll
// of the node wakes at once when Redis comes back, and each reads storage
// (token, device, attributes or RPCs); spread over this, 10,000 polls do not
// hit Redis in the same instant. A variable for tests.
var resyncSpread = 2 * time.Second

// resyncPause waits a random part of resyncSpread before a wait woken by a
// resync looks again; false when ctx ended or timeout fired first (the wait
// then ends as it would have).
func (e *Engine) resyncPause(ctx context.Context, timeout <-chan time.Time) bool {
	if resyncSpread <= 0 {
		return true
	}
	t := time.NewTimer(rand.N(resyncSpread))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-timeout:
		return false
	case <-ctx.Done():
		return false
	}
}
