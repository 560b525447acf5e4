package engine

import (
	"context"
	"testing"

	"github.com/google/uuid"
)

// TestSetUserCredentialsEnabled: a disabled user's access token, refresh token
// and API keys are refused and it cannot log in; enabled again, it logs in, its
// keys work, and its tokens from before the disabling stay outdated (ThingsBoard
// outdates them on disabling).
func TestSetUserCredentialsEnabled(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin, sys := te.tenantAdmin(t), te.sysadmin(t)
	access, refresh, err := te.Login(ctx, DemoCustomerUserEmail, "customer")
	if err != nil {
		t.Fatal(err)
	}
	cust, err := te.Authenticate(ctx, "Bearer "+access)
	if err != nil {
		t.Fatal(err)
	}
	k, err := te.SaveAPIKey(ctx, cust, &APIKeyRequest{Description: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	key := "ApiKey " + *k.Value

	set := func(p *Principal, id uuid.UUID, enabled bool, code Code) {
		t.Helper()
		wantCode(t, te.SetUserCredentialsEnabled(ctx, p, id, enabled), code)
	}
	set(cust, cust.UserID, false, CodePermissionDenied)
	set(sys, cust.UserID, false, CodePermissionDenied) // a customer user is its tenant's
	set(te.newTenant(t, "B", "b@example.com"), cust.UserID, false, CodePermissionDenied)
	set(admin, uuid.New(), false, CodeItemNotFound)
	if _, err := te.Authenticate(ctx, key); err != nil {
		t.Fatalf("a refused disabling took effect: %v", err)
	}

	set(admin, cust.UserID, false, 0)
	if _, err := te.Authenticate(ctx, "Bearer "+access); err != ErrTokenExpired {
		t.Errorf("access token of a disabled user: %v", err)
	}
	if _, _, err := te.Refresh(ctx, refresh); err != errTokenOutdated {
		t.Errorf("refresh token of a disabled user: %v", err)
	}
	if _, err := te.Authenticate(ctx, key); err != errUserNotActive {
		t.Errorf("API key of a disabled user: %v", err)
	}
	if _, _, err := te.Login(ctx, DemoCustomerUserEmail, "customer"); err != errUserNotActive {
		t.Errorf("login of a disabled user: %v", err)
	}
	set(admin, cust.UserID, false, 0) // again: no change

	set(admin, cust.UserID, true, 0)
	a2, _, err := te.Login(ctx, DemoCustomerUserEmail, "customer")
	if err != nil {
		t.Fatalf("login once enabled: %v", err)
	}
	if _, err := te.Authenticate(ctx, "Bearer "+a2); err != nil {
		t.Fatal(err)
	}
	if _, err := te.Authenticate(ctx, key); err != nil {
		t.Errorf("API key once enabled: %v", err)
	}
	if _, err := te.Authenticate(ctx, "Bearer "+access); err != ErrTokenExpired {
		t.Errorf("token from before the disabling: %v", err)
	}
}

// TestSetUserCredentialsEnabledAdmins: a system administrator manages tenant
// admins and other system administrators but may not disable itself.
func TestSetUserCredentialsEnabledAdmins(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin, sys := te.tenantAdmin(t), te.sysadmin(t)
	err := te.SetUserCredentialsEnabled(ctx, sys, sys.UserID, false)
	if ee, ok := err.(*Error); !ok || ee.Code != CodePermissionDenied || ee.Msg != "Sysadmin is not allowed to disable himself" {
		t.Fatalf("sysadmin disabling itself: %v", err)
	}
	wantCode(t, te.SetUserCredentialsEnabled(ctx, sys, sys.UserID, true), 0)
	if _, err := te.CurrentUser(ctx, sys); err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.SetUserCredentialsEnabled(ctx, admin, sys.UserID, false), CodePermissionDenied)

	wantCode(t, te.SetUserCredentialsEnabled(ctx, sys, admin.UserID, false), 0)
	if _, _, err := te.Login(ctx, DemoTenantAdminEmail, "tenant"); err != errUserNotActive {
		t.Fatalf("disabled tenant admin logs in: %v", err)
	}
	wantCode(t, te.SetUserCredentialsEnabled(ctx, sys, admin.UserID, true), 0)
	te.tenantAdmin(t)
}

// TestEnabledUserNotActivated: enabling a user who has no password yet does
// not stop its activation.
func TestEnabledUserNotActivated(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	u, err := te.SaveUser(ctx, admin, &User{Email: "new@example.com", Authority: TenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.SetUserCredentialsEnabled(ctx, admin, u.ID.ID, true), 0)
	tok, err := te.ActivationToken(ctx, admin, u.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := te.Activate(ctx, tok, "password1"); err != nil {
		t.Fatal(err)
	}
}

// TestDisabledUserNotActivated: a user disabled before it used its link
// cannot activate itself with it until enabled again.
func TestDisabledUserNotActivated(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	u, tok := te.invited(t, admin, "pending@example.com")
	wantCode(t, te.SetUserCredentialsEnabled(ctx, admin, u.ID.ID, false), 0)
	_, _, err := te.Activate(ctx, tok, "password1")
	wantCode(t, err, CodeBadRequestParams)
	wantCode(t, te.CheckActivateToken(ctx, tok), CodeBadRequestParams)
	wantCode(t, te.SetUserCredentialsEnabled(ctx, admin, u.ID.ID, true), 0)
	if _, _, err := te.Activate(ctx, tok, "password1"); err != nil {
		t.Fatalf("activate once enabled: %v", err)
	}
}

// TestDisableReachesOtherNodes: disabling on node B refuses the user's token on
// node A at once.
func TestDisableReachesOtherNodes(t *testing.T) {
	ctx := context.Background()
	a, b, _ := twoNodes(t, nil)
	access, _, err := a.Login(ctx, DemoCustomerUserEmail, "customer")
	if err != nil {
		t.Fatal(err)
	}
	cust, err := a.Authenticate(ctx, "Bearer "+access)
	if err != nil {
		t.Fatal(err)
	}
	adminAccess, _, err := b.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := b.Authenticate(ctx, "Bearer "+adminAccess)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetUserCredentialsEnabled(ctx, admin, cust.UserID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+access); err != ErrTokenExpired {
		t.Fatalf("node A after disabling on B: %v", err)
	}
}
