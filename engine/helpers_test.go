package engine

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-iot/sluice/storage/embedded"
)

// testEngine is an engine over a fresh embedded back end with the demo data.
type testEngine struct {
	*Engine
	demo BootstrapResult
}

// openDB opens an embedded store in a temporary folder, closed with the test.
func openDB(t testing.TB) *embedded.DB {
	t.Helper()
	db, err := embedded.Open(t.TempDir(), embedded.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// newTestEngine is an engine over a fresh embedded store with the demo data;
// tweak, when given, changes its configuration first.
func newTestEngine(t testing.TB, tweak ...func(*Config)) *testEngine {
	t.Helper()
	db := openDB(t)
	cfg := Config{JWTSigningKey: []byte("test-signing-key-0123456789abcdef"), BcryptCost: bcrypt.MinCost}
	for _, f := range tweak {
		f(&cfg)
	}
	e := New(db, cfg)
	t.Cleanup(func() { e.Close(context.Background()) }) // before the store's
	res, err := e.Bootstrap(context.Background(), true, "")
	if err != nil {
		t.Fatal(err)
	}
	return &testEngine{Engine: e, demo: res}
}

// login returns the principal of a user after a real login.
func (te *testEngine) login(t testing.TB, email, password string) *Principal {
	t.Helper()
	access, _, err := te.Login(context.Background(), email, password)
	if err != nil {
		t.Fatalf("login %s: %v", email, err)
	}
	p, err := te.Authenticate(context.Background(), "Bearer "+access)
	if err != nil {
		t.Fatalf("authenticate %s: %v", email, err)
	}
	return p
}

func (te *testEngine) sysadmin(t *testing.T) *Principal {
	return te.login(t, SysadminEmail, "sysadmin")
}
func (te *testEngine) tenantAdmin(t *testing.T) *Principal {
	return te.login(t, DemoTenantAdminEmail, "tenant")
}
func (te *testEngine) customerUser(t *testing.T) *Principal {
	return te.login(t, DemoCustomerUserEmail, "customer")
}

// newTenant creates a second tenant with an admin and returns the admin.
func (te *testEngine) newTenant(t *testing.T, title, email string) *Principal {
	t.Helper()
	ctx := context.Background()
	tn, err := te.SaveTenant(ctx, te.sysadmin(t), &Tenant{Title: title})
	if err != nil {
		t.Fatal(err)
	}
	u := &User{Email: email, Authority: TenantAdmin, TenantID: tn.ID, CustomerID: newEntityID(EntityCustomer, NullUUID)}
	if _, err := te.createUser(ctx, u, "pw-"+title); err != nil {
		t.Fatal(err)
	}
	return te.login(t, email, "pw-"+title)
}

// wantCode fails unless err is an *Error with code (0: err must be nil).
func wantCode(t *testing.T, err error, code Code) {
	t.Helper()
	if code == 0 {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	var ee *Error
	if !errors.As(err, &ee) {
		t.Fatalf("want *Error code %d, got %v", code, err)
	}
	if ee.Code != code {
		t.Fatalf("want code %d, got %d (%s)", code, ee.Code, ee.Msg)
	}
}

// invited creates a tenant admin of admin's tenant who has not activated the
// account yet, and returns it with an activation token.
func (te *testEngine) invited(t *testing.T, admin *Principal, email string) (*User, string) {
	t.Helper()
	ctx := context.Background()
	u, err := te.SaveUser(ctx, admin, &User{Email: email, Authority: TenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := te.ActivationToken(ctx, admin, u.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	return u, tok
}
