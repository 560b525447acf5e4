package engine

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func claimsOf(t *testing.T, token string) (jwt.MapClaims, map[string]any) {
	t.Helper()
	var mc jwt.MapClaims
	tok, _, err := jwt.NewParser().ParseUnverified(token, &mc)
	if err != nil {
		t.Fatal(err)
	}
	return mc, tok.Header
}

func TestTokenClaims(t *testing.T) {
	te := newTestEngine(t)
	access, refresh, err := te.Login(context.Background(), DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	ac, hdr := claimsOf(t, access)
	if hdr["alg"] != "HS512" {
		t.Fatalf("alg %v", hdr["alg"])
	}
	for _, k := range []string{"sub", "userId", "scopes", "sessionId", "iss", "iat", "exp", "enabled", "isPublic", "tenantId", "customerId"} {
		if _, ok := ac[k]; !ok {
			t.Errorf("access token lacks %q: %v", k, ac)
		}
	}
	if ac["sub"] != DemoTenantAdminEmail || ac["iss"] != "thingsboard.io" || ac["customerId"] != NullUUID.String() ||
		ac["tenantId"] != te.demo.DemoTenantID.String() || ac["enabled"] != true || ac["isPublic"] != false {
		t.Errorf("access claims: %v", ac)
	}
	if s, _ := ac["scopes"].([]any); len(s) != 1 || s[0] != TenantAdmin {
		t.Errorf("access scopes: %v", ac["scopes"])
	}
	exp, _ := ac.GetExpirationTime()
	iat, _ := ac.GetIssuedAt()
	if d := exp.Sub(iat.Time); d != 9000*time.Second {
		t.Errorf("access lifetime %v", d)
	}

	rc, _ := claimsOf(t, refresh)
	for _, k := range []string{"sub", "userId", "scopes", "sessionId", "isPublic", "jti", "iss", "iat", "exp"} {
		if _, ok := rc[k]; !ok {
			t.Errorf("refresh token lacks %q: %v", k, rc)
		}
	}
	if s, _ := rc["scopes"].([]any); len(s) != 1 || s[0] != RefreshScope {
		t.Errorf("refresh scopes: %v", rc["scopes"])
	}
	if rc["sessionId"] != ac["sessionId"] {
		t.Errorf("pair has two sessions")
	}

	sc, _ := claimsOf(t, must2(te.Login(context.Background(), SysadminEmail, "sysadmin")))
	if sc["tenantId"] != NullUUID.String() || sc["customerId"] != NullUUID.String() {
		t.Errorf("sysadmin claims: %v", sc)
	}
}

func must2(a, _ string, err error) string {
	if err != nil {
		panic(err)
	}
	return a
}

func TestAuthenticateRefusesForeignTokens(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	access, refresh, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	var good accessClaims
	if err := te.parseJWT(access, &good); err != nil {
		t.Fatal(err)
	}
	sign := func(m jwt.SigningMethod, key any) string {
		s, err := jwt.NewWithClaims(m, good).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	noneTok := sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType)
	expired := good
	expired.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-time.Minute))
	expiredTok, _ := jwt.NewWithClaims(jwt.SigningMethodHS512, expired).SignedString(te.cfg.JWTSigningKey)
	parts := strings.Split(access, ".")

	f := func(name, header string, code Code) {
		t.Helper()
		p, err := te.Authenticate(ctx, header)
		wantCode(t, err, code)
		if code != 0 && p != nil {
			t.Errorf("%s: principal returned with error", name)
		}
	}
	f("valid", "Bearer "+access, 0)
	f("empty", "", CodeAuthentication)
	f("lower-case prefix", "bearer "+access, CodeAuthentication)
	f("no prefix", access, CodeAuthentication)
	f("unknown api key", "ApiKey tb_abc", CodeAuthentication)
	f("garbage", "Bearer abc.def", CodeAuthentication)
	f("alg none", "Bearer "+noneTok, CodeAuthentication)
	f("HS256 same key", "Bearer "+sign(jwt.SigningMethodHS256, te.cfg.JWTSigningKey), CodeAuthentication)
	f("RS256", "Bearer "+sign(jwt.SigningMethodRS256, rsaKey), CodeAuthentication)
	f("other HS512 key", "Bearer "+sign(jwt.SigningMethodHS512, []byte("another key")), CodeJWTExpired)
	f("tampered payload", "Bearer "+parts[0]+"."+parts[1]+"x."+parts[2], CodeAuthentication)
	f("expired", "Bearer "+expiredTok, CodeJWTExpired)
	f("refresh as access", "Bearer "+refresh, CodeAuthentication)

	// Algorithm substitution is "unsupported" (10), not "expired" (11).
	_, err = te.Authenticate(ctx, "Bearer "+noneTok)
	if err != ErrBadCredentials {
		t.Errorf("alg none: %v", err)
	}
}

func TestRefresh(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	access, refresh, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	a2, r2, err := te.Refresh(ctx, refresh)
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := claimsOf(t, access)
	c2, _ := claimsOf(t, a2)
	if c1["sessionId"] == c2["sessionId"] {
		t.Error("refresh kept the session")
	}
	if _, err := te.Authenticate(ctx, "Bearer "+a2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := te.Refresh(ctx, r2); err != nil {
		t.Fatal(err)
	}

	f := func(token string, code Code) {
		t.Helper()
		_, _, err := te.Refresh(ctx, token)
		wantCode(t, err, code)
	}
	f("", CodeAuthentication)
	f("  ", CodeAuthentication)
	// An access token is not a refresh token: 500 code 2, as ThingsBoard answers.
	f(access, CodeGeneral)
	_, _, err = te.Refresh(ctx, access)
	if ee, ok := err.(*Error); !ok || ee.Msg != "Invalid Refresh Token scope" {
		t.Fatalf("access token refreshed: %v", err)
	}
	f("x.y.z", CodeAuthentication)

	// Expiry, seen through the engine clock.
	te.now = func() time.Time { return time.Now().Add(604800*time.Second + time.Minute) }
	f(refresh, CodeJWTExpired)
	_, err = te.Authenticate(ctx, "Bearer "+access)
	wantCode(t, err, CodeJWTExpired)
}
