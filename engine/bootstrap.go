package engine

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// Accounts and tokens of the system and of the demo data (compat §7.8).
const (
	SysadminEmail            = "sysadmin@thingsboard.org"
	DemoTenantAdminEmail     = "tenant@thingsboard.org"
	DemoCustomerUserEmail    = "customer@thingsboard.org"
	DemoDeviceName           = "Demo Device"
	DemoDeviceToken          = "DHT11_DEMO_TOKEN"
	DemoCustomerDeviceName   = "Customer Device"
	DemoCustomerDeviceToken  = "A1_TEST_TOKEN"
	demoSysadminPassword     = "sysadmin"
	demoTenantAdminPassword  = "tenant"
	demoCustomerUserPassword = "customer"
	kindBootstrap            = "bootstrap"
)

// BootstrapResult tells the caller what Bootstrap set up.
type BootstrapResult struct {
	// GeneratedPassword is the generated password of sysadmin@thingsboard.org. It is
	// set only by the run that created the account; print it once, never log it again.
	GeneratedPassword string `json:"-"`
	// The demo fields are set when Bootstrap ran with demo.
	DemoTenantID        uuid.UUID `json:"demoTenantId"`
	DemoCustomerID      uuid.UUID `json:"demoCustomerId"`
	DemoDeviceID        uuid.UUID `json:"demoDeviceId"`
	DemoDeviceToken     string    `json:"demoDeviceToken"`
	CustomerDeviceID    uuid.UUID `json:"customerDeviceId"`
	CustomerDeviceToken string    `json:"customerDeviceToken"`
}

// demoNamespace derives the fixed ids of the demo tenant and customer, so a second
// run finds what the first created instead of creating it again.
var demoNamespace = uuid.MustParse("5b0f7c9e-3a43-4e0c-9d0e-6f1f2b8f1a57")

func demoID(name string) uuid.UUID { return uuid.NewSHA1(demoNamespace, []byte(name)) }

// firstPassword derives the system administrator's first password from the JWT
// signing key: the nodes of a cluster share the key, so nodes starting together
// on an empty store all print the one that works, whichever writes last (a
// random one per node let each print its own). Whoever holds the key can sign a
// system administrator's token anyway. A node without a configured key signs
// with a random one, which makes this random too.
func firstPassword(signingKey []byte) string {
	mac := hmac.New(sha256.New, signingKey)
	mac.Write([]byte("sluice: first password of sysadmin@thingsboard.org"))
	sum := mac.Sum(nil)
	out := make([]byte, 16)
	for i := range out {
		// 16 of 32 bytes, each mod 62: slightly uneven, still about 95 bits.
		out[i] = alphanumeric[sum[i]%62]
	}
	return string(out)
}

// Bootstrap prepares storage for a node and may run on every start. On the
// first start it creates the system administrator sysadmin@thingsboard.org: its
// password is sysadminPassword, else "sysadmin" with demo, else 16 characters
// derived from the JWT signing key (firstPassword) returned in the result; an
// existing account is never changed, and one deleted or renamed later is not
// created again (see ensureSysadmin). With demo it creates, once, tenant "Tenant"
// (admin tenant@thingsboard.org / tenant) with its default profile, "Customer A"
// (user customer@thingsboard.org / customer), the tenant-owned "Demo Device" with
// token DHT11_DEMO_TOKEN and "Customer Device" of Customer A with token
// A1_TEST_TOKEN. Once the demo is complete it is not recreated, so a user may
// delete parts of it; an interrupted run is completed by the next one.
func (e *Engine) Bootstrap(ctx context.Context, demo bool, sysadminPassword string) (BootstrapResult, error) {
	var res BootstrapResult
	password, generated := sysadminPassword, false
	if password == "" && demo {
		password = demoSysadminPassword
	} else if password == "" {
		password, generated = firstPassword(e.cfg.JWTSigningKey), true
	}
	created, err := e.ensureSysadmin(ctx, password)
	if err != nil {
		return res, fmt.Errorf("cannot create the system administrator: %w", err)
	}
	if created && generated {
		res.GeneratedPassword = password
	}
	if !demo {
		return res, nil
	}
	if err := e.ensureDemo(ctx, &res); err != nil {
		return res, fmt.Errorf("cannot create the demo data: %w", err)
	}
	return res, nil
}

// sysadminMarker records that Bootstrap created the system administrator (or
// found an installation that had one), under sysadminMarkerID in kindBootstrap.
type sysadminMarker struct {
	CreatedTime int64 `json:"createdTime"`
}

var sysadminMarkerID = demoID("sysadmin-bootstrapped")

// ensureSysadmin creates sysadmin@thingsboard.org with password once per
// installation, as ThingsBoard does at install only: after the marker is
// written, an account that was deleted or renamed stays so, instead of coming
// back on the next start with a known password. An installation without the
// marker (made by an older Sluice) that has sysadmins or tenants but no
// sysadmin@thingsboard.org is not new: it only gets the marker. An account
// without credentials (a first start interrupted half-way) is completed
// before the marker is written. created tells whether password was set.
func (e *Engine) ensureSysadmin(ctx context.Context, password string) (created bool, err error) {
	if _, err := getRecord[sysadminMarker](ctx, e, kindBootstrap, sysadminMarkerID); err == nil {
		return false, nil
	} else if !errors.Is(err, storage.ErrNotFound) {
		return false, err
	}
	_, err = lookupRecord[User](ctx, e, kindUser, emailKey(SysadminEmail))
	switch {
	case err == nil:
		// Present: ensureUser below only sets the password of one without credentials.
	case !errors.Is(err, storage.ErrNotFound):
		return false, err
	default:
		// Absent: a new installation, or an older one whose account was
		// deleted or renamed.
		used, err := e.hasAccounts(ctx)
		if err != nil {
			return false, err
		}
		if used {
			return false, e.putSysadminMarker(ctx)
		}
	}
	sysadmin := &User{
		Email:      SysadminEmail,
		Authority:  SysAdmin,
		TenantID:   newEntityID(EntityTenant, NullUUID),
		CustomerID: newEntityID(EntityCustomer, NullUUID),
	}
	if created, err = e.ensureUser(ctx, sysadmin, password); err != nil {
		return false, err
	}
	return created, e.putSysadminMarker(ctx)
}

func (e *Engine) putSysadminMarker(ctx context.Context) error {
	return e.putRecord(ctx, kindBootstrap, sysadminMarkerID, uuid.Nil, sysadminMarker{CreatedTime: e.now().UnixMilli()})
}

// hasAccounts reports whether any system administrator or tenant exists (every
// other user belongs to a tenant).
func (e *Engine) hasAccounts(ctx context.Context) (bool, error) {
	for _, k := range []struct {
		kind  string
		owner uuid.UUID
	}{{kindUser, NullUUID}, {kindTenant, uuid.Nil}} {
		rs, err := e.store.List(ctx, k.kind, k.owner)
		if err != nil {
			return false, fmt.Errorf("cannot list %s: %w", k.kind, err)
		}
		if len(rs) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// ensureDemo creates whatever part of the demo is missing, then records that the
// demo is complete.
func (e *Engine) ensureDemo(ctx context.Context, res *BootstrapResult) error {
	markerID := demoID("demo-complete")
	if done, err := getRecord[BootstrapResult](ctx, e, kindBootstrap, markerID); err == nil {
		pw := res.GeneratedPassword
		*res = *done
		res.GeneratedPassword = pw
		return nil
	} else if !errors.Is(err, storage.ErrNotFound) {
		return err
	}

	tenant, err := e.ensureDemoTenant(ctx)
	if err != nil {
		return err
	}
	customer, err := e.ensureDemoCustomer(ctx, tenant)
	if err != nil {
		return err
	}
	admin := &User{Email: DemoTenantAdminEmail, Authority: TenantAdmin,
		TenantID: newEntityID(EntityTenant, tenant), CustomerID: newEntityID(EntityCustomer, NullUUID)}
	if _, err := e.ensureUser(ctx, admin, demoTenantAdminPassword); err != nil {
		return err
	}
	user := &User{Email: DemoCustomerUserEmail, Authority: CustomerUser,
		TenantID: newEntityID(EntityTenant, tenant), CustomerID: newEntityID(EntityCustomer, customer)}
	if _, err := e.ensureUser(ctx, user, demoCustomerUserPassword); err != nil {
		return err
	}
	demoDev, demoToken, err := e.ensureDevice(ctx, tenant, NullUUID, DemoDeviceName, DemoDeviceToken)
	if err != nil {
		return err
	}
	custDev, custToken, err := e.ensureDevice(ctx, tenant, customer, DemoCustomerDeviceName, DemoCustomerDeviceToken)
	if err != nil {
		return err
	}
	res.DemoTenantID, res.DemoCustomerID = tenant, customer
	res.DemoDeviceID, res.DemoDeviceToken = demoDev, demoToken
	res.CustomerDeviceID, res.CustomerDeviceToken = custDev, custToken
	return e.putRecord(ctx, kindBootstrap, markerID, uuid.Nil, res)
}

func (e *Engine) ensureDemoTenant(ctx context.Context) (uuid.UUID, error) {
	id := demoID("tenant")
	_, err := getRecord[Tenant](ctx, e, kindTenant, id)
	switch {
	case err == nil:
		_, err = e.defaultProfile(ctx, id)
	case errors.Is(err, storage.ErrNotFound):
		_, err = e.createTenant(ctx, id, &Tenant{Title: "Tenant"})
	}
	return id, err
}

func (e *Engine) ensureDemoCustomer(ctx context.Context, tenant uuid.UUID) (uuid.UUID, error) {
	id := demoID("customer-a")
	_, err := getRecord[Customer](ctx, e, kindCustomer, id)
	if errors.Is(err, storage.ErrNotFound) {
		_, err = e.createCustomer(ctx, tenant, id, &Customer{Title: "Customer A"})
	}
	return id, err
}

// ensureUser creates u with password unless a user with its e-mail exists, and
// gives an existing user without credentials (an interrupted create) the password.
// created tells whether password was set.
func (e *Engine) ensureUser(ctx context.Context, u *User, password string) (created bool, err error) {
	for range 2 {
		old, err := lookupRecord[User](ctx, e, kindUser, emailKey(u.Email))
		if err == nil {
			_, err = getRecord[userCredentials](ctx, e, kindUserCreds, old.ID.ID)
			if !errors.Is(err, storage.ErrNotFound) {
				return false, err
			}
			return true, e.putUserCredentials(ctx, old, password)
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return false, err
		}
		if _, err = e.createUser(ctx, u, password); err == nil {
			return true, nil
		}
		// Another node may have created it meanwhile: look again once.
	}
	return false, fmt.Errorf("user %s: %w", u.Email, storage.ErrConflict)
}

// ensureDevice creates the named device of tenant with token unless it exists, and
// returns its id and current token. Another node starting on the same store may
// create it meanwhile (its name or token is then taken): look again.
func (e *Engine) ensureDevice(ctx context.Context, tenant, customer uuid.UUID, name, token string) (uuid.UUID, string, error) {
	var err error
	for range 3 {
		var id uuid.UUID
		var current string
		id, current, err = e.ensureDeviceOnce(ctx, tenant, customer, name, token)
		if !errors.Is(err, errDeviceNameTaken) && !errors.Is(err, errTokenTaken) {
			return id, current, err
		}
	}
	return uuid.Nil, "", err
}

func (e *Engine) ensureDeviceOnce(ctx context.Context, tenant, customer uuid.UUID, name, token string) (uuid.UUID, string, error) {
	d, err := lookupRecord[Device](ctx, e, kindDevice, deviceNameKey(tenant, name))
	if errors.Is(err, storage.ErrNotFound) {
		d, err = e.saveDevice(ctx, tenant, &Device{Name: name, CustomerID: newEntityID(EntityCustomer, customer)}, token)
		if err != nil {
			return uuid.Nil, "", err
		}
		return d.ID.ID, token, nil
	}
	if err != nil {
		return uuid.Nil, "", err
	}
	creds, err := e.credentialsOf(ctx, d.ID.ID)
	if errors.Is(err, storage.ErrNotFound) {
		creds, err = e.createCredentials(ctx, tenant, d.ID.ID, token)
	}
	if err != nil {
		return uuid.Nil, "", err
	}
	return d.ID.ID, creds.CredentialsID, nil
}
