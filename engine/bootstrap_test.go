package engine

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"
	"golang.org/x/crypto/bcrypt"
)

func TestBootstrapIdempotent(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	e := New(db, Config{BcryptCost: bcrypt.MinCost})

	first, err := e.Bootstrap(ctx, true, "")
	if err != nil {
		t.Fatal(err)
	}
	if first.GeneratedPassword != "" {
		t.Error("demo sysadmin password is fixed, nothing to print")
	}
	if first.DemoDeviceToken != DemoDeviceToken || first.CustomerDeviceToken != DemoCustomerDeviceToken {
		t.Fatalf("tokens: %+v", first)
	}
	users := func() map[string]string {
		out := map[string]string{}
		for _, email := range []string{SysadminEmail, DemoTenantAdminEmail, DemoCustomerUserEmail} {
			u, err := lookupRecord[User](ctx, e, kindUser, emailKey(email))
			if err != nil {
				t.Fatal(err)
			}
			out[email] = u.ID.ID.String()
		}
		return out
	}
	before := users()

	second, err := e.Bootstrap(ctx, true, "")
	if err != nil {
		t.Fatal(err)
	}
	if second != first {
		t.Fatalf("second run differs:\n%+v\n%+v", first, second)
	}
	after := users()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s recreated", k)
		}
	}
	devs, err := listRecords[Device](ctx, e, kindDevice, first.DemoTenantID)
	if err != nil || len(devs) != 2 {
		t.Fatalf("devices: %d %v", len(devs), err)
	}
	tenants, err := listRecords[Tenant](ctx, e, kindTenant, uuid.Nil)
	if err != nil || len(tenants) != 1 {
		t.Fatalf("tenants: %d %v", len(tenants), err)
	}
	profiles, err := listRecords[DeviceProfile](ctx, e, kindProfile, first.DemoTenantID)
	if err != nil || len(profiles) != 1 || !profiles[0].Default || profiles[0].Name != DefaultProfileName {
		t.Fatalf("profiles: %d %v", len(profiles), err)
	}

	d, err := e.DeviceByToken(ctx, DemoDeviceToken)
	if err != nil || d.ID.ID != first.DemoDeviceID || !isNull(d.CustomerID.ID) || d.Name != DemoDeviceName {
		t.Fatalf("demo device: %+v %v", d, err)
	}
	d, err = e.DeviceByToken(ctx, DemoCustomerDeviceToken)
	if err != nil || d.CustomerID.ID != first.DemoCustomerID {
		t.Fatalf("customer device: %+v %v", d, err)
	}
}

func TestBootstrapGeneratedPassword(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	e := New(db, Config{BcryptCost: bcrypt.MinCost})

	res, err := e.Bootstrap(ctx, false, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.GeneratedPassword) != 16 || res.DemoDeviceToken != "" {
		t.Fatalf("result: %q %q", res.GeneratedPassword, res.DemoDeviceToken)
	}
	if _, _, err := e.Login(ctx, SysadminEmail, res.GeneratedPassword); err != nil {
		t.Fatal(err)
	}
	// Never regenerated, never replaced: not by a second run, not by a password.
	again, err := e.Bootstrap(ctx, false, "")
	if err != nil || again.GeneratedPassword != "" {
		t.Fatalf("second run: %q %v", again.GeneratedPassword, err)
	}
	if _, err := e.Bootstrap(ctx, false, "other"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Login(ctx, SysadminEmail, res.GeneratedPassword); err != nil {
		t.Fatal(err)
	}
	if _, err := lookupRecord[User](ctx, e, kindUser, emailKey(DemoTenantAdminEmail)); err == nil {
		t.Fatal("demo users without demo")
	}
}

// TestBootstrapConcurrentNodes: nodes sharing a signing key and starting
// together on an empty store may each think they created the system
// administrator; whichever password they print, it is the one that works.
func TestBootstrapConcurrentNodes(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	cfg := Config{BcryptCost: bcrypt.MinCost, JWTSigningKey: []byte("shared-signing-key-0123456789abcdef")}
	nodes := []*Engine{New(db, cfg), New(db, cfg), New(db, cfg)}
	printed := make([]string, len(nodes))
	var wg sync.WaitGroup
	for i, e := range nodes {
		wg.Go(func() {
			res, err := e.Bootstrap(ctx, false, "")
			if err != nil {
				t.Error(err)
			}
			printed[i] = res.GeneratedPassword
		})
	}
	wg.Wait()
	for i, pw := range printed {
		if pw == "" {
			continue
		}
		if _, _, err := nodes[0].Login(ctx, SysadminEmail, pw); err != nil {
			t.Fatalf("node %d printed %q, which does not log in: %v", i, pw, err)
		}
	}
	if printed[0]+printed[1]+printed[2] == "" {
		t.Fatal("no node printed the password")
	}
	if other := firstPassword([]byte("another key")); other == firstPassword(cfg.JWTSigningKey) || len(other) != 16 {
		t.Fatalf("first password %q", other)
	}
}

func TestBootstrapGivenPassword(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	e := New(db, Config{BcryptCost: bcrypt.MinCost})
	res, err := e.Bootstrap(ctx, true, "s3cret")
	if err != nil || res.GeneratedPassword != "" {
		t.Fatalf("%q %v", res.GeneratedPassword, err)
	}
	if _, _, err := e.Login(ctx, SysadminEmail, "s3cret"); err != nil {
		t.Fatal(err)
	}
}

// TestBootstrapSysadminNotRecreated: the default system administrator is
// created on the first start only. Deleted or renamed, it does not come back
// with its known password on a restart, also on a store made before the
// marker existed.
func TestBootstrapSysadminNotRecreated(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	cfg := Config{BcryptCost: bcrypt.MinCost, JWTSigningKey: []byte("bootstrap-marker-test-key")}
	e := New(db, cfg)
	if _, err := e.Bootstrap(ctx, true, ""); err != nil {
		t.Fatal(err)
	}
	principal := func(e *Engine, email, password string) *Principal {
		t.Helper()
		access, _, err := e.Login(ctx, email, password)
		if err != nil {
			t.Fatalf("login %s: %v", email, err)
		}
		p, err := e.Authenticate(ctx, "Bearer "+access)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	restart := func() *Engine {
		t.Helper()
		e := New(db, cfg)
		if _, err := e.Bootstrap(ctx, true, ""); err != nil {
			t.Fatal(err)
		}
		return e
	}
	gone := func(e *Engine) {
		t.Helper()
		if _, _, err := e.Login(ctx, SysadminEmail, demoSysadminPassword); err != ErrBadCredentials {
			t.Fatalf("login with the old password: %v", err)
		}
		if _, err := lookupRecord[User](ctx, e, kindUser, emailKey(SysadminEmail)); err == nil {
			t.Fatal("the default system administrator was created again")
		}
	}

	// Renamed by itself: the new name keeps the password, the old one is not recreated.
	def := principal(e, SysadminEmail, demoSysadminPassword)
	u, err := e.CurrentUser(ctx, def)
	if err != nil {
		t.Fatal(err)
	}
	u.Email = "root@example.com"
	if _, err := e.SaveUser(ctx, def, u); err != nil {
		t.Fatal(err)
	}
	e = restart()
	gone(e)
	root := principal(e, "root@example.com", demoSysadminPassword)

	// Deleted by another system administrator, on a store without the marker
	// (an older Sluice): still not recreated, and the marker is written.
	other := &User{Email: SysadminEmail, Authority: SysAdmin,
		TenantID: newEntityID(EntityTenant, NullUUID), CustomerID: newEntityID(EntityCustomer, NullUUID)}
	other, err = e.createUser(ctx, other, "chosen-password")
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, e.DeleteUser(ctx, root, other.ID.ID), 0)
	if err := db.Delete(ctx, kindBootstrap, sysadminMarkerID); err != nil {
		t.Fatal(err)
	}
	e = restart()
	gone(e)
	if _, err := db.Get(ctx, kindBootstrap, sysadminMarkerID); err != nil {
		t.Fatalf("marker not written for an older store: %v", err)
	}
	e = restart()
	gone(e)
}

// TestBootstrapSysadminCompleted: a first start interrupted after the account
// but before its credentials is completed by the next start, marker or not.
func TestBootstrapSysadminCompleted(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	e := New(db, Config{BcryptCost: bcrypt.MinCost})
	u := &User{Email: SysadminEmail, Authority: SysAdmin,
		TenantID: newEntityID(EntityTenant, NullUUID), CustomerID: newEntityID(EntityCustomer, NullUUID)}
	u.ID = newEntityID(EntityUser, newID())
	if err := e.putUser(ctx, u); err != nil { // the account, no credentials
		t.Fatal(err)
	}
	if _, err := e.Bootstrap(ctx, false, "given"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Login(ctx, SysadminEmail, "given"); err != nil {
		t.Fatal(err)
	}
}

// TestBootstrapDemoConcurrentNodes: nodes loading the demo data together on an
// empty store all start, and the data is there once.
func TestBootstrapDemoConcurrentNodes(t *testing.T) {
	for round := range 5 {
		db := openDB(t)
		ctx := context.Background()
		cfg := Config{BcryptCost: bcrypt.MinCost, JWTSigningKey: []byte("shared-signing-key-0123456789abcdef")}
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if _, err := New(db, cfg).Bootstrap(ctx, true, ""); err != nil {
					t.Errorf("round %d: %v", round, err)
				}
			})
		}
		wg.Wait()
		e := New(db, cfg)
		for _, tok := range []string{DemoDeviceToken, DemoCustomerDeviceToken} {
			if _, err := e.DeviceByToken(ctx, tok); err != nil {
				t.Fatalf("round %d: %s: %v", round, tok, err)
			}
		}
	}
}
