package engine

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestLogoutEndsSession: after a logout the session's access token is "Token has
// expired" (11) and its refresh token "Token is outdated" (10), as ThingsBoard
// answers; the user's other sessions, and new logins, go on.
func TestLogoutEndsSession(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a1, r1, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	a2, r2, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.Authenticate(ctx, "Bearer "+a1); err != nil { // cache the user's state
		t.Fatal(err)
	}

	if err := te.Logout(ctx, "Bearer "+a1); err != nil {
		t.Fatal(err)
	}
	if _, err := te.Authenticate(ctx, "Bearer "+a1); err != ErrTokenExpired {
		t.Fatalf("access token after logout: %v", err)
	}
	if _, _, err := te.Refresh(ctx, r1); err != errTokenOutdated {
		t.Fatalf("refresh token after logout: %v", err)
	}
	if err := te.Logout(ctx, "Bearer "+a1); err != ErrTokenExpired {
		t.Fatalf("second logout: %v", err)
	}

	if _, err := te.Authenticate(ctx, "Bearer "+a2); err != nil {
		t.Fatalf("other session: %v", err)
	}
	a3, _, err := te.Refresh(ctx, r2)
	if err != nil {
		t.Fatalf("other session's refresh: %v", err)
	}
	if _, err := te.Authenticate(ctx, "Bearer "+a3); err != nil {
		t.Fatal(err)
	}
	a4, _, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.Authenticate(ctx, "Bearer "+a4); err != nil {
		t.Fatalf("login after logout: %v", err)
	}

	// Bad credentials are refused as anywhere else.
	wantCode(t, te.Logout(ctx, ""), CodeAuthentication)
	wantCode(t, te.Logout(ctx, "Bearer x.y.z"), CodeAuthentication)
	wantCode(t, te.Logout(ctx, "Bearer "+r2), CodeAuthentication) // a refresh token
}

// TestLogoutWithAPIKey: an API key has no session, so its logout is a no-op.
func TestLogoutWithAPIKey(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	k, err := te.SaveAPIKey(ctx, admin, &APIKeyRequest{Description: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if err := te.Logout(ctx, "ApiKey "+*k.Value); err != nil {
		t.Fatal(err)
	}
	if _, err := te.Authenticate(ctx, "ApiKey "+*k.Value); err != nil {
		t.Fatalf("key after its logout: %v", err)
	}
	if _, err := te.CurrentUser(ctx, admin); err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.Logout(ctx, "ApiKey "+APIKeyPrefix+"nope"), CodeAuthentication)
}

// TestLogoutReachesOtherNodes: a logout on node B is refused on node A at once,
// though A cached the user's state for an hour.
func TestLogoutReachesOtherNodes(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoNodes(t, nil)
	access, refresh, err := a.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+access); err != nil {
		t.Fatal(err)
	}
	if err := b.Logout(ctx, "Bearer "+access); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+access); err != ErrTokenExpired {
		t.Fatalf("node A after a logout on B: %v", err)
	}
	if _, _, err := a.Refresh(ctx, refresh); err != errTokenOutdated {
		t.Fatalf("node A refreshes a session logged out on B: %v", err)
	}
}

// TestLogoutOvertaken: a logout whose write is overtaken by another change of the
// credentials (another session's logout, on another node) reads them again, so
// both hold.
func TestLogoutOvertaken(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a1, _, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	a2, _, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	overtake := te.overtaker()
	overtake(func() {
		if err := te.Logout(ctx, "Bearer "+a2); err != nil {
			t.Error(err)
		}
	})
	if err := te.Logout(ctx, "Bearer "+a1); err != nil {
		t.Fatal(err)
	}
	for i, a := range []string{a1, a2} {
		if _, err := te.Authenticate(ctx, "Bearer "+a); err != ErrTokenExpired {
			t.Errorf("session %d: %v", i+1, err)
		}
	}
}

// TestRevokedSessionsBounded: entries go once no token of theirs can be valid,
// and past maxRevokedSessions live ones a logout outdates every token of the user.
func TestRevokedSessionsBounded(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	uid := te.tenantAdmin(t).UserID
	stored := func() *userCredentials {
		t.Helper()
		c, err := getRecord[userCredentials](ctx, te.Engine, kindUserCreds, uid)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a1, _, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	if err := te.Logout(ctx, "Bearer "+a1); err != nil {
		t.Fatal(err)
	}
	c := stored()
	if len(c.RevokedSessions) != 1 {
		t.Fatalf("revoked sessions: %v", c.RevokedSessions)
	}
	for _, until := range c.RevokedSessions {
		if want := time.Now().Add(604800 * time.Second).Unix(); until < want-5 || until > want+5 {
			t.Errorf("kept until %d, want about %d", until, want)
		}
	}

	// A week later the entry goes with the next write of the credentials.
	later := time.Now().Add(604800*time.Second + time.Minute)
	te.now = func() time.Time { return later }
	a2, _, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	if err := te.Logout(ctx, "Bearer "+a2); err != nil {
		t.Fatal(err)
	}
	if c := stored(); len(c.RevokedSessions) != 1 {
		t.Fatalf("expired entry kept: %v", c.RevokedSessions)
	}

	// Fill the record to the bound: the next logout outdates every session.
	c, prev, err := loadRecord[userCredentials](ctx, te.Engine, kindUserCreds, uid)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(c.RevokedSessions); i < maxRevokedSessions; i++ {
		c.RevokedSessions[strings.Repeat("x", i+1)] = later.Add(time.Hour).Unix()
	}
	if err := te.writeCreds(ctx, c, &prev); err != nil {
		t.Fatal(err)
	}
	te.evictUserEverywhere(uid)
	a3, _, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	a4, r4, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	if err := te.Logout(ctx, "Bearer "+a3); err != nil {
		t.Fatal(err)
	}
	if c := stored(); len(c.RevokedSessions) != 0 || c.TokensValidFrom != later.Unix()+1 {
		t.Fatalf("past the bound: %d entries, valid from %d", len(c.RevokedSessions), c.TokensValidFrom)
	}
	if _, err := te.Authenticate(ctx, "Bearer "+a4); err != ErrTokenExpired {
		t.Fatalf("other session past the bound: %v", err)
	}
	if _, _, err := te.Refresh(ctx, r4); err != errTokenOutdated {
		t.Fatalf("other session's refresh past the bound: %v", err)
	}
	a5, _, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.Authenticate(ctx, "Bearer "+a5); err != nil {
		t.Fatalf("login in the second of the fallback: %v", err)
	}
}

func TestRevokeSessionPrunesFirst(t *testing.T) {
	c := &userCredentials{RevokedSessions: map[string]int64{}}
	for i := range maxRevokedSessions {
		c.RevokedSessions[strings.Repeat("x", i+1)] = 100 // expired at 100
	}
	c.revokeSession("s", 200, 300)
	if len(c.RevokedSessions) != 1 || c.RevokedSessions["s"] != 300 || c.TokensValidFrom != 0 {
		t.Fatalf("expired entries counted towards the bound: %d, %d", len(c.RevokedSessions), c.TokensValidFrom)
	}
	if revoked(c.RevokedSessions, "") || !revoked(c.RevokedSessions, "s") || revoked(nil, "s") {
		t.Fatal("revoked")
	}
}
