// Package engine is the platform domain of Sluice: tenants, customers, users and
// their authentication, device profiles, devices and credentials, attributes and
// telemetry reads. It knows nothing about HTTP or SQL: the front end calls it, and it
// calls the storage interfaces.
package engine

import (
	"crypto/rand"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-iot/sluice/storage"
)

// Config holds the engine settings that come from the node configuration.
type Config struct {
	// JWTSigningKey signs access and refresh tokens (HS512).
	JWTSigningKey []byte
	// AccessTokenTTL and RefreshTokenTTL are the JWT lifetimes (9000 s and 604800 s by default).
	AccessTokenTTL  time.Duration
	RefreshTokenTTL time.Duration
	// Issuer is the JWT "iss" claim.
	Issuer string
	// MaxAggIntervals caps the number of buckets of an aggregated read (700 as in ThingsBoard).
	MaxAggIntervals int64
	// BcryptCost is the cost of password hashes (bcrypt.DefaultCost by default; tests lower it).
	BcryptCost int
	// TokenCacheTTL bounds how long a node trusts its cached token → device entry.
	// Changes made on this node evict at once; the TTL bounds how long another node
	// may still accept a changed or deleted token (30 s by default).
	TokenCacheTTL time.Duration
}

// Engine is the platform domain over one storage back end.
type Engine struct {
	cfg   Config
	store storage.Backend
	now   func() time.Time

	// tokens caches access token → *tokenEntry for the device API (see tokencache.go).
	tokens sync.Map
	// tokenGen counts evictions so a lookup racing with one does not cache a stale
	// entry; tokenMu orders such a lookup's store against evictions. Cache hits take
	// neither.
	tokenGen atomic.Uint64
	tokenMu  sync.Mutex
}

// New returns an engine over store.
func New(store storage.Backend, cfg Config) *Engine {
	if cfg.Issuer == "" {
		cfg.Issuer = "thingsboard.io"
	}
	if cfg.AccessTokenTTL == 0 {
		cfg.AccessTokenTTL = 9000 * time.Second
	}
	if cfg.RefreshTokenTTL == 0 {
		cfg.RefreshTokenTTL = 604800 * time.Second
	}
	if cfg.MaxAggIntervals == 0 {
		cfg.MaxAggIntervals = 700
	}
	if cfg.BcryptCost == 0 {
		cfg.BcryptCost = bcrypt.DefaultCost
	}
	if cfg.TokenCacheTTL == 0 {
		cfg.TokenCacheTTL = 30 * time.Second
	}
	if len(cfg.JWTSigningKey) == 0 {
		// Never sign with an empty key. A random one works for a single node; tokens
		// do not survive a restart and other nodes refuse them, so configure a key.
		cfg.JWTSigningKey = make([]byte, 64)
		rand.Read(cfg.JWTSigningKey)
	}
	return &Engine{cfg: cfg, store: store, now: time.Now}
}
