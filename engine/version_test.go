package engine

import (
	"context"
	"errors"
	"testing"
)

// TestStaleVersionIsConflict: a tenant, customer or user saved with a version
// other than the stored one is 409 (errorCode 35), ThingsBoard's optimistic
// lock; the stored version, or none, saves.
func TestStaleVersionIsConflict(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	sys, admin := te.sysadmin(t), te.tenantAdmin(t)
	conflict := func(what string, err error) {
		t.Helper()
		var ee *Error
		if !errors.As(err, &ee) || ee.Code != CodeVersionConflict || ee.Msg != what+" was already changed by someone else" {
			t.Fatalf("%s saved over a stale version: %v", what, err)
		}
	}

	tn, err := te.SaveTenant(ctx, sys, &Tenant{Title: "versioned"})
	if err != nil {
		t.Fatal(err)
	}
	stale := *tn
	stale.Version = tn.Version + 5
	_, err = te.SaveTenant(ctx, sys, &stale)
	conflict("Tenant", err)
	cur := *tn
	if tn, err = te.SaveTenant(ctx, sys, &cur); err != nil {
		t.Fatalf("the stored version: %v", err)
	}
	none := *tn
	none.Version = 0
	if _, err := te.SaveTenant(ctx, sys, &none); err != nil {
		t.Fatalf("no version: %v", err)
	}

	c, err := te.SaveCustomer(ctx, admin, &Customer{Title: "versioned"})
	if err != nil {
		t.Fatal(err)
	}
	sc := *c
	sc.Version = c.Version + 1
	_, err = te.SaveCustomer(ctx, admin, &sc)
	conflict("Customer", err)

	u, err := te.SaveUser(ctx, admin, &User{Email: "versioned@example.com", Authority: TenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	su := *u
	su.Version = u.Version + 1
	_, err = te.SaveUser(ctx, admin, &su)
	conflict("User", err)
	if _, err := te.SaveUser(ctx, admin, u); err != nil {
		t.Fatalf("the stored version: %v", err)
	}
}
