// Package engine is the platform domain of Sluice: tenants, customers, users and
// their authentication, device profiles, devices and credentials, attributes and
// telemetry reads. It knows nothing about HTTP or SQL: the front end calls it, and it
// calls the storage interfaces.
package engine

import (
	"crypto/rand"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-iot/sluice/notify"
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
	// AuthCacheTTL bounds how long a node trusts its cached view of a user (password
	// change time, enabled, role) and of an API key. Changes made on this node evict
	// at once; the TTL bounds how long another node may still accept an outdated JWT
	// or a revoked key (10 s by default).
	AuthCacheTTL time.Duration
	// LoginMaxFailures failed logins of one user, or LoginMaxAddressFailures from
	// one client address, within LoginLockout lock further logins of that user
	// (address) for LoginLockout (5, 50 and 300 s by default).
	LoginMaxFailures        int
	LoginMaxAddressFailures int
	LoginLockout            time.Duration
	// ActivationTTL is how long an activation token works (24 h by default).
	ActivationTTL time.Duration
	// RPCDefaultTimeout is the timeout of a server-side RPC whose request gives
	// none; RPCMinTimeout the least one honoured (10 s and 5 s by default).
	RPCDefaultTimeout time.Duration
	RPCMinTimeout     time.Duration
	// ScriptTimeout and ScriptMaxMemory bound one run of a client-side RPC rule
	// script (1 s and 16 MiB by default).
	ScriptTimeout   time.Duration
	ScriptMaxMemory int
	// ClaimDuration is how long a device-side claim is valid when the device gives
	// no duration (24 h by default). ClaimNotByDefault, when set, lets only devices
	// with the server attribute claimingAllowed=true be claimed (ThingsBoard's
	// security.claim.allowClaimingByDefault=false).
	ClaimDuration     time.Duration
	ClaimNotByDefault bool
	// LongPollMaxPerNode and LongPollMaxPerDevice cap the device long polls this
	// node holds at once, in all and per device; 0 means no cap (see ratelimit.go).
	LongPollMaxPerNode   int
	LongPollMaxPerDevice int
	// InactivityTimeout is how long a device stays active after its last request
	// when its server attribute inactivityTimeout does not say (10 minutes by
	// default, ThingsBoard's state.defaultInactivityTimeoutInSec; see activity.go).
	InactivityTimeout time.Duration
	// Notifier carries cache evictions and device pushes (shared-attribute changes,
	// device deletion) to the other nodes of a cluster; nil means this node is alone
	// (the embedded default) and an in-process notifier is used.
	Notifier notify.Notifier
	// Logger receives the engine's warnings; nil discards them.
	Logger *slog.Logger
}

// Engine is the platform domain over one storage back end.
type Engine struct {
	cfg   Config
	store storage.Backend
	now   func() time.Time

	// tokens caches access token → device for the device API (see tokencache.go).
	tokens tokenCache

	// users caches user id → *userState and apiKeys SHA-256 hex → *apiKeyRecord
	// for REST authentication (see authcache.go).
	users   ttlCache[uuid.UUID, *userState]
	apiKeys ttlCache[string, *apiKeyRecord]
	// logins counts failed logins per user and client address (see lockout.go).
	logins *loginGuard
	// polls counts the device long polls waiting on this node (see push.go).
	polls atomic.Int64
	// otaCache keeps recently read OTA package chunks (see otadata.go).
	otaCache chunkCache
	// rpcLocks serialise RPC request id allocation per device (see rpc.go).
	rpcLocks rpcLocks
	// rules caches client-side RPC rules and runs their scripts (see rules.go).
	rules ruleState
	// limits holds tenant rate limits, their buckets and per-device poll counts (see ratelimit.go).
	limits limitState
	// sweeps deletes deleted devices' data once more, after stragglers (see sweep.go).
	sweeps sweeper
	// resync wakes RPC waits when notifications may have been lost (see evict.go).
	resync resync
	// activity holds the devices' last requests not yet written (see activity.go).
	activity activity
	// rollouts are this node's background OTA rollouts (see ota_rollout.go).
	rollouts rollouts
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
	if cfg.AuthCacheTTL == 0 {
		cfg.AuthCacheTTL = 10 * time.Second
	}
	if cfg.LoginMaxFailures == 0 {
		cfg.LoginMaxFailures = 5
	}
	if cfg.LoginMaxAddressFailures == 0 {
		cfg.LoginMaxAddressFailures = 50
	}
	if cfg.LoginLockout == 0 {
		cfg.LoginLockout = 300 * time.Second
	}
	if cfg.ActivationTTL == 0 {
		cfg.ActivationTTL = 24 * time.Hour
	}
	if len(cfg.JWTSigningKey) == 0 {
		// Never sign with an empty key. A random one works for a single node; tokens
		// do not survive a restart and other nodes refuse them, so configure a key.
		cfg.JWTSigningKey = make([]byte, 64)
		rand.Read(cfg.JWTSigningKey)
	}
	if cfg.RPCDefaultTimeout == 0 {
		cfg.RPCDefaultTimeout = 10 * time.Second
	}
	if cfg.RPCMinTimeout == 0 {
		cfg.RPCMinTimeout = 5 * time.Second
	}
	if cfg.ScriptTimeout == 0 {
		cfg.ScriptTimeout = time.Second
	}
	if cfg.ScriptMaxMemory == 0 {
		cfg.ScriptMaxMemory = 16 << 20
	}
	if cfg.InactivityTimeout == 0 {
		cfg.InactivityTimeout = 10 * time.Minute
	}
	if cfg.ClaimDuration == 0 {
		cfg.ClaimDuration = 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Notifier == nil {
		cfg.Notifier = notify.NewLocal()
	}
	e := &Engine{cfg: cfg, store: store, now: time.Now}
	e.tokens.ttl = cfg.TokenCacheTTL
	e.users.ttl, e.apiKeys.ttl = cfg.AuthCacheTTL, cfg.AuthCacheTTL
	e.logins = newLoginGuard(cfg.LoginMaxFailures, cfg.LoginMaxAddressFailures, cfg.LoginLockout)
	e.subscribeEvictions()
	e.initLimits()
	return e
}
