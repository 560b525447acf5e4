package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestShippedFileMatchesDefaults(t *testing.T) {
	c, err := Load("../configs/sluice.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c != Default() {
		t.Fatalf("configs/sluice.yaml differs from Default():\n%+v\n%+v", c, Default())
	}
}

func TestEnvOverridesFile(t *testing.T) {
	c, err := Load("../configs/sluice.yaml", []string{
		"HTTP_BIND_PORT=9090", "SLUICE_DEMO=true", "JWT_TOKEN_EXPIRATION_TIME=60", "SLUICE_DATA_DIR=/tmp/x",
		"SLUICE_LOGIN_MAX_FAILURES=3", "SLUICE_LOGIN_LOCKOUT=60", "SLUICE_LONG_POLL_MAX_TIMEOUT=1000",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.BindPort != 9090 || !c.Data.Demo || c.Auth.TokenExpiration != 60 || c.Data.Dir != "/tmp/x" ||
		c.Auth.LoginMaxFailures != 3 || c.Auth.LoginLockout != 60 || c.HTTP.LongPollMaxTimeout != 1000 {
		t.Fatalf("env not applied: %+v", c)
	}
}

func TestBadValuesNameTheKey(t *testing.T) {
	f := func(env, wantKey string) {
		t.Helper()
		_, err := Load("", []string{env})
		if err == nil || !strings.Contains(err.Error(), wantKey) {
			t.Fatalf("%s: want error naming %s, got %v", env, wantKey, err)
		}
	}
	f("HTTP_BIND_PORT=abc", "HTTP_BIND_PORT")
	f("HTTP_BIND_PORT=70000", "HTTP_BIND_PORT")
	f("SSL_ENABLED=maybe", "SSL_ENABLED")
	f("SSL_ENABLED=true", "SSL_PEM_CERT")
	f("JWT_TOKEN_EXPIRATION_TIME=-1", "JWT_TOKEN_EXPIRATION_TIME")
	f("JWT_REFRESH_TOKEN_EXPIRATION_TIME=x", "JWT_REFRESH_TOKEN_EXPIRATION_TIME")
	f("JWT_TOKEN_SIGNING_KEY=short", "JWT_TOKEN_SIGNING_KEY")
	f("SLUICE_DEMO=yes please", "SLUICE_DEMO")
	f("SLUICE_INGEST_QUEUE_SIZE=0", "SLUICE_INGEST_QUEUE_SIZE")
	f("SLUICE_MAX_BODY_SIZE=-5", "SLUICE_MAX_BODY_SIZE")
	f("SLUICE_LOG_LEVEL=loud", "SLUICE_LOG_LEVEL")
	f("SLUICE_LOGIN_MAX_FAILURES=0", "SLUICE_LOGIN_MAX_FAILURES")
	f("SLUICE_LOGIN_MAX_ADDRESS_FAILURES=-1", "SLUICE_LOGIN_MAX_ADDRESS_FAILURES")
	f("SLUICE_LOGIN_LOCKOUT=x", "SLUICE_LOGIN_LOCKOUT")
	f("SLUICE_ACTIVATION_TTL=0", "SLUICE_ACTIVATION_TTL")
	f("SLUICE_LONG_POLL_MAX_TIMEOUT=0", "SLUICE_LONG_POLL_MAX_TIMEOUT")
	f("SLUICE_LONG_POLL_MAX_TIMEOUT=5m", "SLUICE_LONG_POLL_MAX_TIMEOUT")
	f("SLUICE_TRUSTED_PROXIES=10.0.0.0/8,lb.example.com", "SLUICE_TRUSTED_PROXIES")
	f("SLUICE_HTTP_MAX_HEADER_SIZE=2000000000", "SLUICE_HTTP_MAX_HEADER_SIZE")
	f("SLUICE_INGEST_SHARDS=50000000", "SLUICE_INGEST_SHARDS")
	f("JWT_TOKEN_EXPIRATION_TIME=2000000000", "JWT_TOKEN_EXPIRATION_TIME")
	f("SLUICE_SPOOL_FLUSH_INTERVAL_MS=9223372036854", "SLUICE_SPOOL_FLUSH_INTERVAL_MS") // overflowed a duration
	f("SLUICE_SPOOL_MAX_BYTES=9223372036854775807", "SLUICE_SPOOL_MAX_BYTES")
	f("SLUICE_LONG_POLL_MAX_PER_DEVICE=2000000000", "SLUICE_LONG_POLL_MAX_PER_DEVICE")
	f("SLUICE_DATA_MIN_FREE_MB=-1", "SLUICE_DATA_MIN_FREE_MB")
	f("SLUICE_REPORT_TIMEOUT=0", "SLUICE_REPORT_TIMEOUT")
	for _, o := range []string{"app.example.com", "https://app.example.com/app", "https://app.example.com?x", "https://App.example.com", "https://", "https://u@app.example.com",
		"https://app.example.com:443", "http://x:80", "https://[::1]:443", "https://app.example.com:", "https://app.example.com:0443", "https://app.example.com:0",
		"https://bücher.example", "https://b%C3%BCcher.example"} {
		f("SLUICE_CORS_ALLOWED_ORIGINS=https://ok.example,"+o, "SLUICE_CORS_ALLOWED_ORIGINS")
	}
	for _, ok := range []string{"*", "none", "https://app.example.com/", "http://localhost:3000, https://[::1]:8443", "capacitor://localhost",
		"https://app.example.com:80", "http://x:443", "https://xn--bcher-kva.example", "capacitor://localhost:443"} {
		if _, err := Load("", []string{"SLUICE_CORS_ALLOWED_ORIGINS=" + ok}); err != nil {
			t.Fatalf("origins %q refused: %v", ok, err)
		}
	}

	// The file takes 64-bit numbers: one that would overflow a duration is
	// refused, not turned into tokens that are expired when issued.
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte("auth:\n  jwt_token_expiration_time: 10000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path, nil); err == nil || !strings.Contains(err.Error(), "JWT_TOKEN_EXPIRATION_TIME") {
		t.Fatalf("huge file value: %v", err)
	}
}

// TestCORSOriginAdvice: an entry browsers would never send as Origin is
// refused with what to write instead.
func TestCORSOriginAdvice(t *testing.T) {
	for origin, want := range map[string]string{
		"https://app.example.com:443": "drop the port",
		"http://x:80":                 "drop the port",
		"https://[::1]:443":           "(https://[::1])",
		"https://app.example.com:":    "drop the ':'",
		"https://app.example.com:08":  "without leading zeros",
		"https://bücher.example":      "punycode",
		"https://BÜCHER.example":      "punycode",
		"https://b%C3%BCcher.example": "punycode",
	} {
		_, err := Load("", []string{"SLUICE_CORS_ALLOWED_ORIGINS=" + origin})
		if err == nil || !strings.Contains(err.Error(), "SLUICE_CORS_ALLOWED_ORIGINS") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: want an error saying %q, got %v", origin, want, err)
		}
	}
}

func TestTrustedProxies(t *testing.T) {
	h := HTTP{TrustedProxies: " 10.1.2.3, 192.168.0.0/16 ,::ffff:172.16.0.0/108, fd00::/8,"}
	got, err := h.Proxies()
	if err != nil {
		t.Fatal(err)
	}
	want := "[10.1.2.3/32 192.168.0.0/16 172.16.0.0/12 fd00::/8]"
	if s := fmt.Sprint(got); s != want {
		t.Fatalf("Proxies() = %s, want %s", s, want)
	}
}

func TestUnknownFileKeyRejected(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(p, []byte("http:\n  bind_prot: 1\n"), 0o600)
	if _, err := Load(p, nil); err == nil || !strings.Contains(err.Error(), "bind_prot") {
		t.Fatalf("want error naming bind_prot, got %v", err)
	}
}

func TestBackendSelection(t *testing.T) {
	c, err := Load("", []string{"CLICKHOUSE_ADDR=127.0.0.1:9000", "REDIS_ADDR=127.0.0.1:6379", "REDIS_CLUSTER=true"})
	if err != nil || !c.Production() || !c.Redis.RedisCluster || c.ClickHouse.CHDatabase != "sluice" {
		t.Fatalf("production config: %+v, %v", c, err)
	}
	if c, err := Load("", nil); err != nil || c.Production() {
		t.Fatalf("default must be embedded: %v", err)
	}
	for _, env := range []string{"CLICKHOUSE_ADDR=127.0.0.1:9000", "REDIS_ADDR=127.0.0.1:6379"} {
		_, err := Load("", []string{env})
		if err == nil || !strings.Contains(err.Error(), "CLICKHOUSE_ADDR") || !strings.Contains(err.Error(), "REDIS_ADDR") {
			t.Fatalf("%s alone: want an error naming both, got %v", env, err)
		}
	}
}

func TestProductionExampleLoads(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(cert, []byte("x"), 0o600)
	os.WriteFile(key, []byte("x"), 0o600)
	c, err := Load("../configs/production.yaml", []string{"SSL_PEM_CERT=" + cert, "SSL_PEM_KEY=" + key})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Production() || c.Log.Format != "json" {
		t.Fatalf("production example: %+v", c)
	}
}
