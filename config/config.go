// Package config loads the node configuration: built-in defaults, then the YAML
// file (configs/sluice.yaml), then environment variables, which win. Every key has
// an environment variable; a bad value stops start-up with a message naming it.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/caarlos0/env/v11"
	"gopkg.in/yaml.v3"
)

// Config is the whole node configuration. Field names are unique across the
// struct so that an environment parse error can be traced back to its variable.
type Config struct {
	HTTP       HTTP       `yaml:"http"`
	SSL        SSL        `yaml:"ssl"`
	Data       Data       `yaml:"data"`
	Auth       Auth       `yaml:"auth"`
	Ingest     Ingest     `yaml:"ingest"`
	Limits     Limits     `yaml:"limits"`
	Log        Log        `yaml:"log"`
	ClickHouse ClickHouse `yaml:"clickhouse"`
	Redis      Redis      `yaml:"redis"`
	Spool      Spool      `yaml:"spool"`
	Device     Device     `yaml:"device"`
	Analytics  Analytics  `yaml:"analytics"`
}

// Device configures the device control plane: server-side RPC, client-side RPC
// rules and claiming.
type Device struct {
	// RPCDefaultTimeout is the timeout of a server-side RPC whose body gives none,
	// and RPCMinTimeout the least one honoured, in ms (ThingsBoard's
	// server.rest.server_side_rpc.default_timeout and min_timeout).
	RPCDefaultTimeout int `yaml:"rpc_default_timeout_ms" env:"SLUICE_RPC_DEFAULT_TIMEOUT"`
	RPCMinTimeout     int `yaml:"rpc_min_timeout_ms" env:"SLUICE_RPC_MIN_TIMEOUT"`
	// ScriptTimeout and ScriptMaxMemory bound one run of a client-side RPC rule
	// script, in ms and bytes.
	ScriptTimeout   int `yaml:"script_timeout_ms" env:"SLUICE_SCRIPT_TIMEOUT"`
	ScriptMaxMemory int `yaml:"script_max_memory" env:"SLUICE_SCRIPT_MAX_MEMORY"`
	// ClaimDuration is how long a device-side claim stays valid when the device
	// gives no durationMs, in ms (ThingsBoard's security.claim.duration).
	ClaimDuration int `yaml:"claim_duration_ms" env:"DEVICE_CLAIM_DURATION"`
	// ClaimAllowByDefault lets any unassigned device be claimed; when false a device
	// needs the server attribute claimingAllowed=true (security.claim.allowClaimingByDefault).
	ClaimAllowByDefault bool `yaml:"claim_allow_by_default" env:"SLUICE_CLAIM_ALLOW_BY_DEFAULT"`
	// InactivityTimeout is how long a device stays active after its last
	// request, in seconds, unless its server attribute inactivityTimeout (ms)
	// says otherwise (ThingsBoard's state.defaultInactivityTimeoutInSec).
	InactivityTimeout int `yaml:"inactivity_timeout_s" env:"DEFAULT_INACTIVITY_TIMEOUT"`
}

// Analytics sizes the report API.
type Analytics struct {
	// ReportThreads reports run at once; ReportQueue more wait; past that, 429.
	ReportThreads int `yaml:"report_threads" env:"SIMPLE_API_RATE_LIMITER_THREAD_POOL_SIZE"`
	ReportQueue   int `yaml:"report_queue" env:"SIMPLE_API_RATE_LIMITER_QUEUE_CAPACITY"`
	// ReportTimeout bounds one report, its wait in the queue included, in ms.
	ReportTimeout int `yaml:"report_timeout_ms" env:"SLUICE_REPORT_TIMEOUT"`
}

// ClickHouse is the production telemetry store. With Addr empty (and Redis.Addr
// empty) the node runs on the embedded default.
type ClickHouse struct {
	CHAddr     string `yaml:"addr" env:"CLICKHOUSE_ADDR"`
	CHUser     string `yaml:"user" env:"CLICKHOUSE_USER"`
	CHPassword string `yaml:"password" env:"CLICKHOUSE_PASSWORD"`
	CHDatabase string `yaml:"database" env:"CLICKHOUSE_DATABASE"`
	// CHCluster names a cluster of the servers' remote_servers to shard the
	// telemetry over; empty means one server (storage/clickhouse/cluster.go).
	CHCluster string `yaml:"cluster" env:"CLICKHOUSE_CLUSTER"`
	// CHCompression compresses the data sent to ClickHouse: lz4 (the default),
	// zstd, or none for a server on the same host, where compressing only costs
	// CPU on both sides.
	CHCompression string `yaml:"compression" env:"CLICKHOUSE_COMPRESSION"`
}

// Redis is the production state store and notification bus.
type Redis struct {
	RedisAddr     string `yaml:"addr" env:"REDIS_ADDR"`
	RedisPassword string `yaml:"password" env:"REDIS_PASSWORD"`
	RedisCluster  bool   `yaml:"cluster" env:"REDIS_CLUSTER"`
	// RedisPrefix starts every key, so several deployments (or test runs) can
	// share one Redis.
	RedisPrefix string `yaml:"key_prefix" env:"REDIS_KEY_PREFIX"`
}

// Spool is the local write-ahead spool in front of ClickHouse.
type Spool struct {
	SpoolMaxBytes      int64 `yaml:"max_bytes" env:"SLUICE_SPOOL_MAX_BYTES"`
	SpoolBatchRows     int   `yaml:"batch_rows" env:"SLUICE_SPOOL_BATCH_ROWS"`
	SpoolFlushInterval int   `yaml:"flush_interval_ms" env:"SLUICE_SPOOL_FLUSH_INTERVAL_MS"`
	SpoolShards        int   `yaml:"shards" env:"SLUICE_SPOOL_SHARDS"`
}

// Production reports whether the node runs on ClickHouse + Redis.
func (c Config) Production() bool { return c.ClickHouse.CHAddr != "" }

// HTTP is the listener.
type HTTP struct {
	BindAddress string `yaml:"bind_address" env:"HTTP_BIND_ADDRESS"`
	BindPort    int    `yaml:"bind_port" env:"HTTP_BIND_PORT"`
	// LongPollMaxTimeout caps the timeout of the device long polls, in ms.
	LongPollMaxTimeout int `yaml:"long_poll_max_timeout_ms" env:"SLUICE_LONG_POLL_MAX_TIMEOUT"`
	// ReadTimeout bounds reading a request's body once its headers are in,
	// IdleTimeout the wait for the next request on a kept-alive connection, both in
	// ms: a client that stalls mid-request loses its connection.
	ReadTimeout int `yaml:"read_timeout_ms" env:"SLUICE_HTTP_READ_TIMEOUT"`
	IdleTimeout int `yaml:"idle_timeout_ms" env:"SLUICE_HTTP_IDLE_TIMEOUT"`
	// HeaderTimeout bounds receiving the request line and headers, from the
	// request's first byte (a connection's first request: from accepting it), in
	// ms; ReadTimeout then bounds the body. WriteTimeout bounds writing a response.
	HeaderTimeout int `yaml:"header_timeout_ms" env:"SLUICE_HTTP_HEADER_TIMEOUT"`
	WriteTimeout  int `yaml:"write_timeout_ms" env:"SLUICE_HTTP_WRITE_TIMEOUT"`
	// LongPollMaxPerNode and LongPollMaxPerDevice cap the device long polls held at
	// once by this node, in all (503 past it) and per device (429); 0 means no cap.
	LongPollMaxPerNode   int `yaml:"long_poll_max_per_node" env:"SLUICE_LONG_POLL_MAX_PER_NODE"`
	LongPollMaxPerDevice int `yaml:"long_poll_max_per_device" env:"SLUICE_LONG_POLL_MAX_PER_DEVICE"`
	// TrustedProxies lists the load balancers (addresses or CIDR prefixes,
	// comma-separated) whose X-Forwarded-For names the client: the failed-login
	// budget per address and the logs then count the client, not the proxy.
	// Empty: the peer of the connection is the client.
	TrustedProxies string `yaml:"trusted_proxies" env:"SLUICE_TRUSTED_PROXIES"`
	// CORSAllowedOrigins lists the origins (scheme://host[:port], comma-separated)
	// whose browser pages may call /api/; "*" is any (ThingsBoard's default),
	// "none" turns CORS off.
	CORSAllowedOrigins string `yaml:"cors_allowed_origins" env:"SLUICE_CORS_ALLOWED_ORIGINS"`
	// MaxHeaderSize bounds a request's line and headers together, in bytes
	// (431 past it); every connection holds a buffer of this size.
	MaxHeaderSize int `yaml:"max_header_size" env:"SLUICE_HTTP_MAX_HEADER_SIZE"`
}

// CORSOrigins parses CORSAllowedOrigins: nil when CORS is off.
func (h HTTP) CORSOrigins() []string {
	var out []string
	for f := range strings.SplitSeq(h.CORSAllowedOrigins, ",") {
		if f = strings.TrimSpace(f); f != "" && f != "none" {
			out = append(out, strings.TrimSuffix(f, "/"))
		}
	}
	return out
}

// checkOrigin refuses an entry of CORSAllowedOrigins no browser would send as
// its Origin (a missing scheme, a path, upper case, a host not in ASCII, an
// explicit default port): it would lock out the very pages it names, each
// request answered 403.
func checkOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || u.Scheme == "" || u.Host == "" || u.Opaque != "" || u.User != nil ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "?") {
		return fmt.Errorf("%q is not an origin: want scheme://host[:port], e.g. https://app.example.com", o)
	}
	// Before the case: lower case is no advice for a host that is not ASCII.
	// url.Parse decodes %-escapes in the host, so those are looked for in o.
	if !isASCII(o) || strings.Contains(o, "%") {
		return fmt.Errorf("%q: write the host in ASCII, an internationalized domain name in punycode (xn--…), as browsers send it", o)
	}
	if o != strings.ToLower(u.Scheme)+"://"+strings.ToLower(u.Host) {
		return fmt.Errorf("%q: write the origin in lower case, as browsers send it (%s://%s)", o, strings.ToLower(u.Scheme), strings.ToLower(u.Host))
	}
	port := u.Port()
	if port == "" && strings.HasSuffix(u.Host, ":") {
		return fmt.Errorf("%q: drop the ':' after the host, as browsers send it (%s://%s)", o, u.Scheme, strings.TrimSuffix(u.Host, ":"))
	}
	if port == "" {
		return nil
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return fmt.Errorf("%q: the port must be a number from 1 to 65535 without leading zeros, as browsers send it", o)
	}
	if p, ok := defaultPorts[u.Scheme]; ok && p == port {
		// Browsers leave the scheme's default port out of Origin.
		return fmt.Errorf("%q: drop the port, browsers leave %s's default port out of Origin (%s://%s)", o, u.Scheme, u.Scheme, u.Host[:len(u.Host)-len(port)-1])
	}
	return nil
}

// defaultPorts are the ports browsers leave out of an Origin of the scheme.
var defaultPorts = map[string]string{"http": "80", "https": "443"}

// isASCII reports whether s is all ASCII.
func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// Proxies parses TrustedProxies.
func (h HTTP) Proxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(h.TrustedProxies, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if a, err := netip.ParseAddr(f); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR prefix", f)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// SSL turns on HTTPS on the HTTP port (plain HTTP keeps working there too).
type SSL struct {
	SSLEnabled bool   `yaml:"enabled" env:"SSL_ENABLED"`
	PemCert    string `yaml:"pem_cert" env:"SSL_PEM_CERT"`
	PemKey     string `yaml:"pem_key" env:"SSL_PEM_KEY"`
}

// Data is where the embedded back end keeps its folder, and whether demo data is loaded.
type Data struct {
	Dir  string `yaml:"dir" env:"SLUICE_DATA_DIR"`
	Demo bool   `yaml:"demo" env:"SLUICE_DEMO"`
	// MinFreeMB is the free disk space (MiB) below which the embedded back end
	// refuses writes (503) rather than let Pebble fill the disk; 0 turns the
	// guard off.
	MinFreeMB int `yaml:"min_free_mb" env:"SLUICE_DATA_MIN_FREE_MB"`
}

// Auth configures JWTs and the first system administrator.
type Auth struct {
	// SigningKey signs JWTs; empty means generate one on first start and keep it
	// in the data folder.
	SigningKey string `yaml:"jwt_signing_key" env:"JWT_TOKEN_SIGNING_KEY"`
	// TokenExpiration and RefreshExpiration are in seconds.
	TokenExpiration   int    `yaml:"jwt_token_expiration_time" env:"JWT_TOKEN_EXPIRATION_TIME"`
	RefreshExpiration int    `yaml:"jwt_refresh_token_expiration_time" env:"JWT_REFRESH_TOKEN_EXPIRATION_TIME"`
	Issuer            string `yaml:"jwt_token_issuer" env:"JWT_TOKEN_ISSUER"`
	// SysadminPassword is the first sysadmin's password; empty means derived from
	// the JWT signing key and printed once (or "sysadmin" with demo data).
	SysadminPassword string `yaml:"sysadmin_password" env:"SLUICE_SYSADMIN_PASSWORD"`
	// LoginMaxFailures failed logins of one user, or LoginMaxAddressFailures from
	// one client address, within LoginLockout seconds lock further logins of that
	// user (address) for LoginLockout seconds.
	LoginMaxFailures        int `yaml:"login_max_failures" env:"SLUICE_LOGIN_MAX_FAILURES"`
	LoginMaxAddressFailures int `yaml:"login_max_address_failures" env:"SLUICE_LOGIN_MAX_ADDRESS_FAILURES"`
	LoginLockout            int `yaml:"login_lockout" env:"SLUICE_LOGIN_LOCKOUT"`
	// ActivationTTL is how long an activation link works, in seconds.
	ActivationTTL int `yaml:"activation_ttl" env:"SLUICE_ACTIVATION_TTL"`
}

// Ingest sizes the telemetry write path.
type Ingest struct {
	Shards       int `yaml:"shards" env:"SLUICE_INGEST_SHARDS"`
	QueueSize    int `yaml:"queue_size" env:"SLUICE_INGEST_QUEUE_SIZE"`
	MaxBatchRows int `yaml:"max_batch_rows" env:"SLUICE_INGEST_MAX_BATCH_ROWS"`
}

// Limits bound request bodies.
type Limits struct {
	MaxBodySize   int `yaml:"max_body_size" env:"SLUICE_MAX_BODY_SIZE"`
	MaxJSONDepth  int `yaml:"max_json_depth" env:"SLUICE_MAX_JSON_DEPTH"`
	MaxObjectKeys int `yaml:"max_object_keys" env:"SLUICE_MAX_OBJECT_KEYS"`
	MaxEntries    int `yaml:"max_entries" env:"SLUICE_MAX_ENTRIES"`
	MaxKeyLen     int `yaml:"max_key_length" env:"SLUICE_MAX_KEY_LENGTH"`
	MaxValueLen   int `yaml:"max_value_length" env:"SLUICE_MAX_VALUE_LENGTH"`
}

// Log configures log/slog.
type Log struct {
	Level  string `yaml:"level" env:"SLUICE_LOG_LEVEL"`
	Format string `yaml:"format" env:"SLUICE_LOG_FORMAT"`
}

// Default returns the built-in defaults (the values documented in the README).
func Default() Config {
	return Config{
		HTTP: HTTP{BindAddress: "0.0.0.0", BindPort: 8080, LongPollMaxTimeout: 300000, ReadTimeout: 30000, IdleTimeout: 120000,
			HeaderTimeout: 10000, WriteTimeout: 30000, LongPollMaxPerNode: 20000, LongPollMaxPerDevice: 8,
			CORSAllowedOrigins: "*", MaxHeaderSize: 8192},
		Data: Data{Dir: "./data", MinFreeMB: 256},
		Auth: Auth{
			TokenExpiration: 9000, RefreshExpiration: 604800, Issuer: "thingsboard.io",
			LoginMaxFailures: 5, LoginMaxAddressFailures: 50, LoginLockout: 300, ActivationTTL: 86400,
		},
		Ingest: Ingest{QueueSize: 1024, MaxBatchRows: 10000},
		Limits: Limits{
			MaxBodySize: 50 << 20, MaxJSONDepth: 32, MaxObjectKeys: 1000,
			MaxEntries: 100000, MaxKeyLen: 255, MaxValueLen: 1 << 20,
		},
		Log:        Log{Level: "info", Format: "text"},
		ClickHouse: ClickHouse{CHUser: "default", CHDatabase: "sluice", CHCompression: "lz4"},
		Redis:      Redis{RedisPrefix: "sluice:"},
		Spool:      Spool{SpoolMaxBytes: 1 << 30, SpoolBatchRows: 100000, SpoolFlushInterval: 1000, SpoolShards: 4},
		Device: Device{
			RPCDefaultTimeout: 10000, RPCMinTimeout: 5000, ScriptTimeout: 1000, ScriptMaxMemory: 16 << 20,
			ClaimDuration: 86400000, ClaimAllowByDefault: true, InactivityTimeout: 600,
		},
		Analytics: Analytics{ReportThreads: 10, ReportQueue: 10, ReportTimeout: 120_000},
	}
}

// Load returns the defaults overlaid with the YAML file at path (skipped when path
// is empty) and then with environ (KEY=value pairs, as os.Environ gives).
func Load(path string, environ []string) (Config, error) {
	c := Default()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("cannot read config file: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return c, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	if err := env.ParseWithOptions(&c, env.Options{Environment: env.ToMap(environ)}); err != nil {
		return c, envError(err)
	}
	return c, c.Validate()
}

// envError rewrites the library's "field X" errors to name the variable.
func envError(err error) error {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err
	}
	var msgs []error
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			msgs = append(msgs, fmt.Errorf("%s: invalid value: %v", envName(reflect.TypeFor[Config](), pe.Name), pe.Err))
			continue
		}
		msgs = append(msgs, e)
	}
	return errors.Join(msgs...)
}

// envName finds the env tag of the field called name anywhere in t.
func envName(t reflect.Type, name string) string {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Name == name {
			if tag := f.Tag.Get("env"); tag != "" {
				return tag
			}
		}
		if f.Type.Kind() == reflect.Struct {
			if n := envName(f.Type, name); n != name {
				return n
			}
		}
	}
	return name
}

// Validate checks ranges and combinations, naming the variable of a bad value.
func (c Config) Validate() error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if c.HTTP.BindPort < 0 || c.HTTP.BindPort > 65535 {
		bad("HTTP_BIND_PORT", "must be between 0 and 65535, got %d", c.HTTP.BindPort)
	}
	if _, err := c.HTTP.Proxies(); err != nil {
		bad("SLUICE_TRUSTED_PROXIES", "%v", err)
	}
	for _, o := range c.HTTP.CORSOrigins() {
		if err := checkOrigin(o); err != nil {
			bad("SLUICE_CORS_ALLOWED_ORIGINS", "%v", err)
		}
	}
	if c.SSL.SSLEnabled {
		if c.SSL.PemCert == "" {
			bad("SSL_PEM_CERT", "is required when SSL_ENABLED=true")
		} else if _, err := os.Stat(c.SSL.PemCert); err != nil {
			bad("SSL_PEM_CERT", "cannot read %s: %v", c.SSL.PemCert, err)
		}
		if c.SSL.PemKey == "" {
			bad("SSL_PEM_KEY", "is required when SSL_ENABLED=true")
		} else if _, err := os.Stat(c.SSL.PemKey); err != nil {
			bad("SSL_PEM_KEY", "cannot read %s: %v", c.SSL.PemKey, err)
		}
	}
	if c.Data.Dir == "" {
		bad("SLUICE_DATA_DIR", "must not be empty")
	}
	if c.Data.MinFreeMB < 0 || c.Data.MinFreeMB > 1<<30 {
		bad("SLUICE_DATA_MIN_FREE_MB", "must be between 0 (no guard) and %d", 1<<30)
	}
	if c.Auth.SigningKey != "" && len(c.Auth.SigningKey) < 32 {
		bad("JWT_TOKEN_SIGNING_KEY", "must be at least 32 characters (HS512)")
	}
	// Every number has a ceiling far above any sensible value: past it a
	// duration overflows (a 10^10 s token lifetime made every token expired)
	// or a buffer of that size is taken per connection.
	const (
		yearMs    = 365 * 24 * 3600 * 1000
		tenYearsS = 10 * 365 * 24 * 3600
	)
	positive := []struct {
		key string
		v   int
		max int
	}{
		{"JWT_TOKEN_EXPIRATION_TIME", c.Auth.TokenExpiration, tenYearsS},
		{"JWT_REFRESH_TOKEN_EXPIRATION_TIME", c.Auth.RefreshExpiration, tenYearsS},
		{"SLUICE_LOGIN_MAX_FAILURES", c.Auth.LoginMaxFailures, 1_000_000},
		{"SLUICE_LOGIN_MAX_ADDRESS_FAILURES", c.Auth.LoginMaxAddressFailures, 1_000_000},
		{"SLUICE_LOGIN_LOCKOUT", c.Auth.LoginLockout, tenYearsS},
		{"SLUICE_ACTIVATION_TTL", c.Auth.ActivationTTL, tenYearsS},
		{"SLUICE_LONG_POLL_MAX_TIMEOUT", c.HTTP.LongPollMaxTimeout, yearMs},
		{"SLUICE_HTTP_READ_TIMEOUT", c.HTTP.ReadTimeout, yearMs},
		{"SLUICE_HTTP_IDLE_TIMEOUT", c.HTTP.IdleTimeout, yearMs},
		{"SLUICE_HTTP_HEADER_TIMEOUT", c.HTTP.HeaderTimeout, yearMs},
		{"SLUICE_HTTP_WRITE_TIMEOUT", c.HTTP.WriteTimeout, yearMs},
		{"SLUICE_HTTP_MAX_HEADER_SIZE", c.HTTP.MaxHeaderSize, 1 << 20},
		{"SLUICE_INGEST_QUEUE_SIZE", c.Ingest.QueueSize, 1 << 20},
		{"SLUICE_INGEST_MAX_BATCH_ROWS", c.Ingest.MaxBatchRows, 10_000_000},
		{"SLUICE_MAX_BODY_SIZE", c.Limits.MaxBodySize, 1<<31 - 1},
		{"SLUICE_MAX_JSON_DEPTH", c.Limits.MaxJSONDepth, 10_000},
		{"SLUICE_MAX_OBJECT_KEYS", c.Limits.MaxObjectKeys, 10_000_000},
		{"SLUICE_MAX_ENTRIES", c.Limits.MaxEntries, 100_000_000},
		{"SLUICE_MAX_KEY_LENGTH", c.Limits.MaxKeyLen, 1 << 20},
		{"SLUICE_MAX_VALUE_LENGTH", c.Limits.MaxValueLen, 1 << 30},
		{"SLUICE_RPC_DEFAULT_TIMEOUT", c.Device.RPCDefaultTimeout, yearMs},
		{"SLUICE_RPC_MIN_TIMEOUT", c.Device.RPCMinTimeout, yearMs},
		{"SLUICE_SCRIPT_TIMEOUT", c.Device.ScriptTimeout, yearMs},
		{"SLUICE_SCRIPT_MAX_MEMORY", c.Device.ScriptMaxMemory, 1 << 34},
		{"DEVICE_CLAIM_DURATION", c.Device.ClaimDuration, yearMs},
		{"DEFAULT_INACTIVITY_TIMEOUT", c.Device.InactivityTimeout, tenYearsS},
		{"SIMPLE_API_RATE_LIMITER_THREAD_POOL_SIZE", c.Analytics.ReportThreads, 1024},
		{"SLUICE_REPORT_TIMEOUT", c.Analytics.ReportTimeout, 24 * 3600 * 1000},
	}
	for _, p := range positive {
		if p.v <= 0 || p.v > p.max {
			bad(p.key, "must be between 1 and %d, got %d", p.max, p.v)
		}
	}
	if c.HTTP.LongPollMaxPerNode < 0 || c.HTTP.LongPollMaxPerNode > 100_000_000 {
		bad("SLUICE_LONG_POLL_MAX_PER_NODE", "must be between 0 (no cap) and 100000000, got %d", c.HTTP.LongPollMaxPerNode)
	}
	if c.HTTP.LongPollMaxPerDevice < 0 || c.HTTP.LongPollMaxPerDevice > 1_000_000 {
		bad("SLUICE_LONG_POLL_MAX_PER_DEVICE", "must be between 0 (no cap) and 1000000, got %d", c.HTTP.LongPollMaxPerDevice)
	}
	if c.Analytics.ReportQueue < 0 || c.Analytics.ReportQueue > 1_000_000 {
		bad("SIMPLE_API_RATE_LIMITER_QUEUE_CAPACITY", "must be between 0 and 1000000, got %d", c.Analytics.ReportQueue)
	}
	if c.Ingest.Shards < 0 || c.Ingest.Shards > 1024 {
		bad("SLUICE_INGEST_SHARDS", "must be between 0 and 1024 (0: one on the embedded store, one per GOMAXPROCS otherwise), got %d", c.Ingest.Shards)
	}
	if (c.ClickHouse.CHAddr == "") != (c.Redis.RedisAddr == "") {
		bad("CLICKHOUSE_ADDR, REDIS_ADDR", "set both for the production back ends, or neither for the embedded default (got CLICKHOUSE_ADDR=%q, REDIS_ADDR=%q)",
			c.ClickHouse.CHAddr, c.Redis.RedisAddr)
	}
	if c.Redis.RedisPrefix == "" || strings.ContainsAny(c.Redis.RedisPrefix, "{}") {
		bad("REDIS_KEY_PREFIX", "must be non-empty and free of '{' and '}', got %q", c.Redis.RedisPrefix)
	}
	switch c.ClickHouse.CHCompression {
	case "lz4", "zstd", "none":
	default:
		bad("CLICKHOUSE_COMPRESSION", "must be lz4, zstd or none, got %q", c.ClickHouse.CHCompression)
	}
	if c.ClickHouse.CHDatabase == "" {
		bad("CLICKHOUSE_DATABASE", "must not be empty")
	}
	if c.ClickHouse.CHCluster != "" {
		if c.ClickHouse.CHAddr == "" {
			bad("CLICKHOUSE_CLUSTER", "needs CLICKHOUSE_ADDR (a server of the cluster)")
		}
		if strings.Trim(c.ClickHouse.CHCluster, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != "" {
			bad("CLICKHOUSE_CLUSTER", "must be a cluster name of remote_servers (letters, digits, '_', '-', '.'), got %q", c.ClickHouse.CHCluster)
		}
	}
	if c.Spool.SpoolMaxBytes <= 0 || c.Spool.SpoolMaxBytes > 1<<50 {
		bad("SLUICE_SPOOL_MAX_BYTES", "must be between 1 and %d, got %d", int64(1)<<50, c.Spool.SpoolMaxBytes)
	}
	if c.Spool.SpoolBatchRows <= 0 || c.Spool.SpoolBatchRows > 100_000_000 {
		bad("SLUICE_SPOOL_BATCH_ROWS", "must be between 1 and 100000000, got %d", c.Spool.SpoolBatchRows)
	}
	if c.Spool.SpoolShards <= 0 || c.Spool.SpoolShards > 256 {
		bad("SLUICE_SPOOL_SHARDS", "must be between 1 and 256, got %d", c.Spool.SpoolShards)
	}
	if c.Spool.SpoolFlushInterval <= 0 || c.Spool.SpoolFlushInterval > yearMs {
		bad("SLUICE_SPOOL_FLUSH_INTERVAL_MS", "must be between 1 and %d, got %d", yearMs, c.Spool.SpoolFlushInterval)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("SLUICE_LOG_LEVEL", "must be debug, info, warn or error, got %q", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("SLUICE_LOG_FORMAT", "must be text or json, got %q", c.Log.Format)
	}
	return errors.Join(errs...)
}
