package engine

import (
	"context"
	"testing"
)

func TestLogin(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	// A user created over the API waits for activation: no password yet.
	pending, err := te.SaveUser(ctx, te.tenantAdmin(t), &User{Email: "new@example.com", Authority: TenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	f := func(user, pw string, want error) {
		t.Helper()
		_, _, err := te.Login(ctx, user, pw)
		if err != want {
			t.Errorf("Login(%q, %q) = %v, want %v", user, pw, err, want)
		}
	}
	f(DemoTenantAdminEmail, "tenant", nil)
	f("Tenant@ThingsBoard.org", "tenant", nil)
	f(DemoCustomerUserEmail, "customer", nil)
	f(SysadminEmail, "sysadmin", nil)
	f(DemoTenantAdminEmail, "wrong", ErrBadCredentials)
	f(DemoTenantAdminEmail, "Tenant", ErrBadCredentials)
	f("nobody@thingsboard.org", "tenant", ErrBadCredentials)
	f(pending.Email, "", ErrAuthFailed)
	f(pending.Email, "anything", ErrBadCredentials)
	f("", "tenant", ErrAuthFailed)
	f(DemoTenantAdminEmail, "", ErrAuthFailed)
	f("   ", "  ", ErrAuthFailed)
}

func TestCurrentUser(t *testing.T) {
	te := newTestEngine(t)
	p := te.customerUser(t)
	u, err := te.CurrentUser(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if u.Email != DemoCustomerUserEmail || u.Authority != CustomerUser || u.Name != u.Email ||
		u.CustomerID.ID != te.demo.DemoCustomerID || u.TenantID.ID != te.demo.DemoTenantID ||
		u.ID.EntityType != EntityUser || u.TenantID.EntityType != EntityTenant {
		t.Fatalf("current user: %+v", u)
	}
}
