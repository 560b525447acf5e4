package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

func TestChangePasswordOutdatesTokens(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	oldAccess, oldRefresh, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	p, err := te.Authenticate(ctx, "Bearer "+oldAccess)
	if err != nil {
		t.Fatal(err)
	}
	other := te.customerUser(t)

	_, _, err = te.ChangePassword(ctx, p, "wrong", "newpass1")
	wantCode(t, err, CodeBadRequestParams)
	_, _, err = te.ChangePassword(ctx, p, "tenant", "tenant")
	wantCode(t, err, CodeBadRequestParams)
	_, _, err = te.ChangePassword(ctx, p, "tenant", "short")
	wantCode(t, err, CodeBadRequestParams)
	if _, err := te.Authenticate(ctx, "Bearer "+oldAccess); err != nil {
		t.Fatalf("a refused change outdated the token: %v", err)
	}

	access, refresh, err := te.ChangePassword(ctx, p, "tenant", "newpass1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = te.Authenticate(ctx, "Bearer "+oldAccess)
	if err != ErrTokenExpired {
		t.Fatalf("old access token: %v", err)
	}
	_, _, err = te.Refresh(ctx, oldRefresh)
	if err != errTokenOutdated {
		t.Fatalf("old refresh token: %v", err)
	}
	if _, err := te.Authenticate(ctx, "Bearer "+access); err != nil {
		t.Fatalf("new access token: %v", err)
	}
	if _, _, err := te.Refresh(ctx, refresh); err != nil {
		t.Fatalf("new refresh token: %v", err)
	}
	// Logins in the second of the change get tokens that work.
	a2, _, err := te.Login(ctx, DemoTenantAdminEmail, "newpass1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.Authenticate(ctx, "Bearer "+a2); err != nil {
		t.Fatalf("token after change: %v", err)
	}
	_, _, err = te.Login(ctx, DemoTenantAdminEmail, "tenant")
	wantCode(t, err, CodeAuthentication)
	// Other users keep their tokens.
	if _, err := te.CurrentUser(ctx, other); err != nil {
		t.Fatal(err)
	}
}

func TestActivation(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin, cust, sys := te.tenantAdmin(t), te.customerUser(t), te.sysadmin(t)
	other := te.newTenant(t, "B", "b@example.com")
	u, err := te.SaveUser(ctx, admin, &User{Email: "new@example.com", Authority: TenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	f := func(p *Principal, id uuid.UUID, code Code) string {
		t.Helper()
		tok, err := te.ActivationToken(ctx, p, id)
		wantCode(t, err, code)
		return tok
	}
	f(cust, u.ID.ID, CodePermissionDenied)
	f(other, u.ID.ID, CodePermissionDenied)
	f(admin, uuid.New(), CodeItemNotFound)
	f(admin, admin.UserID, CodeBadRequestParams) // already active
	first := f(sys, u.ID.ID, 0)
	tok := f(admin, u.ID.ID, 0)
	if len(tok) < 32 || tok == first {
		t.Fatalf("tokens %q %q", first, tok)
	}
	// The token is stored hashed only.
	r, err := te.store.Get(ctx, kindUserCreds, u.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(r.Data), tok) || len(r.Unique) != 1 || r.Unique[0] != "activateToken:"+sha256Hex(tok) {
		t.Fatalf("stored credentials: %s %v", r.Data, r.Unique)
	}

	activate := func(token, pw string, code Code) {
		t.Helper()
		_, _, err := te.Activate(ctx, token, pw)
		wantCode(t, err, code)
	}
	activate(first, "password1", CodeBadRequestParams) // replaced by the second
	activate("", "password1", CodeBadRequestParams)
	activate(tok, "12345", CodeBadRequestParams)
	activate(tok, "password1", 0)
	activate(tok, "password2", CodeBadRequestParams) // single use
	if _, _, err := te.Login(ctx, "new@example.com", "password1"); err != nil {
		t.Fatal(err)
	}
	f(admin, u.ID.ID, CodeBadRequestParams)

	// Expiry.
	u2, err := te.SaveUser(ctx, admin, &User{Email: "late@example.com", Authority: TenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	late := f(admin, u2.ID.ID, 0)
	te.now = func() time.Time { return time.Now().Add(24*time.Hour + time.Second) }
	activate(late, "password1", CodeBadRequestParams)
}

// TestAccountWritesOverWhatTheyRead: credentials and user updates write over the
// version they read. Two uses of one activation link at once: one activates, the
// other finds the link spent, and its password does not replace the first's. A
// link regenerated while the account is being activated does not undo the
// activation. An update of a user deleted meanwhile does not bring it back.
func TestAccountWritesOverWhatTheyRead(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	_, tok := te.invited(t, admin, "race@example.com")
	overtake := te.overtaker()

	overtake(func() {
		if _, _, err := te.Activate(ctx, tok, "password-first"); err != nil {
			t.Error(err)
		}
	})
	_, _, err := te.Activate(ctx, tok, "password-second")
	wantCode(t, err, CodeBadRequestParams)
	if _, _, err := te.Login(ctx, "race@example.com", "password-first"); err != nil {
		t.Fatalf("the first activation's password: %v", err)
	}

	v, err := te.SaveUser(ctx, admin, &User{Email: "race2@example.com", Authority: TenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	tok2, err := te.ActivationToken(ctx, admin, v.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	overtake(func() {
		if _, _, err := te.Activate(ctx, tok2, "password-kept"); err != nil {
			t.Error(err)
		}
	})
	_, err = te.ActivationToken(ctx, admin, v.ID.ID)
	wantCode(t, err, CodeVersionConflict)
	if _, _, err := te.Login(ctx, "race2@example.com", "password-kept"); err != nil {
		t.Fatalf("activation undone by a regenerated link: %v", err)
	}

	overtake(func() { wantCode(t, te.DeleteUser(ctx, admin, v.ID.ID), 0) })
	_, err = te.SaveUser(ctx, admin, &User{ID: v.ID, Email: "race2@example.com", FirstName: "Back", Authority: TenantAdmin})
	wantCode(t, err, CodeItemNotFound)
	if _, err := te.store.Get(ctx, kindUser, v.ID.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("deleted user brought back: %v", err)
	}
}

// TestPasswordPolicyMessages: the policy's messages are ThingsBoard's (passay's
// LengthRule), the maximum counted in bytes, bcrypt's limit.
func TestPasswordPolicyMessages(t *testing.T) {
	for _, c := range []struct {
		pw   string
		want string
	}{
		{"12345", "Password must be 6 or more characters in length."},
		{"      ", "Password must be 6 or more characters in length."},
		{"éééééé", ""}, // six characters, twelve bytes
		{strings.Repeat("a", 72), ""},
		{strings.Repeat("a", 73), "Password must be no more than 72 characters in length."},
		{strings.Repeat("é", 37), "Password must be no more than 72 characters in length."}, // 74 bytes
	} {
		err := checkNewPassword(c.pw)
		if got := ""; err != nil {
			got = err.Error()
			if got != c.want {
				t.Errorf("%q: %q, want %q", c.pw, got, c.want)
			}
		} else if c.want != "" {
			t.Errorf("%q accepted, want %q", c.pw, c.want)
		}
	}
	te := newTestEngine(t)
	_, _, err := te.ChangePassword(context.Background(), te.tenantAdmin(t), "tenant", strings.Repeat("a", 73))
	if ee, ok := err.(*Error); !ok || ee.Code != CodeBadRequestParams || ee.Msg != "Password must be no more than 72 characters in length." {
		t.Fatalf("too long a new password: %v", err)
	}
	if p := UserPasswordPolicy(); p.MinimumLength != 6 || p.MaximumLength != 72 || !p.AllowWhitespaces {
		t.Fatalf("policy %+v", p)
	}
}

// TestCheckActivateToken: the check tells a usable token from an unknown,
// spent or expired one, and spends nothing.
func TestCheckActivateToken(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	_, tok := te.invited(t, admin, "new@example.com")
	if err := te.CheckActivateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := te.CheckActivateToken(ctx, tok); err != nil {
		t.Fatalf("the check spent the token: %v", err)
	}
	for _, bad := range []string{"", "nope", tok + "x"} {
		if err := te.CheckActivateToken(ctx, bad); err != errActivateTokenBad {
			t.Errorf("%q: %v", bad, err)
		}
	}
	now := te.now
	te.now = func() time.Time { return time.Now().Add(24*time.Hour + time.Second) }
	if err := te.CheckActivateToken(ctx, tok); err != errActivateTokenExpire {
		t.Errorf("expired: %v", err)
	}
	te.now = now
	if _, _, err := te.Activate(ctx, tok, "password1"); err != nil {
		t.Fatal(err)
	}
	if err := te.CheckActivateToken(ctx, tok); err != errActivateTokenBad {
		t.Errorf("spent: %v", err)
	}
}
