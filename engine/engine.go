// Package engine is the platform domain of Sluice: tenants, customers, users and
// their authentication, device profiles, devices and credentials, attributes and
// telemetry reads. It knows nothing about HTTP or SQL: the front end calls it, and it
// calls the storage interfaces.
package engine

import (
	"time"

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
}

// Engine is the platform domain over one storage back end.
type Engine struct {
	cfg   Config
	store storage.Backend
	now   func() time.Time
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
	return &Engine{cfg: cfg, store: store, now: time.Now}
}
