package engine

import (
	"context"
	"testing"

	"github.com/google/uuid"
)

func TestAuthorizeEntity(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin, cust, sys := te.tenantAdmin(t), te.customerUser(t), te.sysadmin(t)
	other := te.newTenant(t, "B", "b@example.com")
	otherDev, err := te.SaveDevice(ctx, other, &Device{Name: "b-dev"}, "")
	if err != nil {
		t.Fatal(err)
	}
	otherCust, err := te.SaveCustomer(ctx, other, &Customer{Title: "B customer"})
	if err != nil {
		t.Fatal(err)
	}
	ownCust2, err := te.SaveCustomer(ctx, admin, &Customer{Title: "Customer B"})
	if err != nil {
		t.Fatal(err)
	}
	d := te.demo
	unknown := uuid.New()

	f := func(p *Principal, typ string, id uuid.UUID, write bool, code Code, wantTenant uuid.UUID) {
		t.Helper()
		tenant, err := te.AuthorizeEntity(ctx, p, typ, id, write)
		wantCode(t, err, code)
		if code == 0 && tenant != wantTenant {
			t.Errorf("tenant %s, want %s", tenant, wantTenant)
		}
	}
	// Tenant admin: everything of its tenant, nothing of another.
	f(admin, EntityDevice, d.DemoDeviceID, true, 0, d.DemoTenantID)
	f(admin, EntityDevice, d.CustomerDeviceID, false, 0, d.DemoTenantID)
	f(admin, EntityTenant, d.DemoTenantID, false, 0, d.DemoTenantID)
	f(admin, EntityTenant, d.DemoTenantID, true, CodePermissionDenied, uuid.Nil) // the sysadmin's to write
	f(admin, EntityCustomer, d.DemoCustomerID, true, 0, d.DemoTenantID)
	f(admin, EntityDevice, otherDev.ID.ID, false, CodePermissionDenied, uuid.Nil)
	f(admin, EntityTenant, other.TenantID, false, CodePermissionDenied, uuid.Nil)
	f(admin, EntityCustomer, otherCust.ID.ID, false, CodePermissionDenied, uuid.Nil)
	f(other, EntityDevice, d.DemoDeviceID, true, CodePermissionDenied, uuid.Nil)
	f(other, EntityDevice, otherDev.ID.ID, true, 0, other.TenantID)
	// Unknown ids and types.
	f(admin, EntityDevice, unknown, false, CodeItemNotFound, uuid.Nil)
	f(admin, EntityTenant, unknown, false, CodeItemNotFound, uuid.Nil)
	f(admin, EntityCustomer, unknown, false, CodeItemNotFound, uuid.Nil)
	f(admin, "ASSET", d.DemoDeviceID, false, CodeBadRequestParams, uuid.Nil)
	f(admin, "device", d.DemoDeviceID, false, CodeBadRequestParams, uuid.Nil)
	// Customer user: its customer's devices (read and write), its customer (read only).
	f(cust, EntityDevice, d.CustomerDeviceID, false, 0, d.DemoTenantID)
	f(cust, EntityDevice, d.CustomerDeviceID, true, 0, d.DemoTenantID)
	f(cust, EntityDevice, d.DemoDeviceID, false, CodePermissionDenied, uuid.Nil)
	f(cust, EntityDevice, otherDev.ID.ID, false, CodePermissionDenied, uuid.Nil)
	f(cust, EntityCustomer, d.DemoCustomerID, false, 0, d.DemoTenantID)
	f(cust, EntityCustomer, d.DemoCustomerID, true, CodePermissionDenied, uuid.Nil)
	f(cust, EntityCustomer, ownCust2.ID.ID, false, CodePermissionDenied, uuid.Nil)
	f(cust, EntityTenant, d.DemoTenantID, false, CodePermissionDenied, uuid.Nil)
	// System administrator: a tenant's own data (ThingsBoard's validateTenant), no device's or customer's.
	f(sys, EntityDevice, d.DemoDeviceID, false, CodePermissionDenied, uuid.Nil)
	f(sys, EntityTenant, d.DemoTenantID, false, 0, d.DemoTenantID)
	f(sys, EntityTenant, d.DemoTenantID, true, 0, d.DemoTenantID)
	f(sys, EntityTenant, unknown, false, CodeItemNotFound, uuid.Nil)
	f(sys, EntityCustomer, d.DemoCustomerID, false, CodePermissionDenied, uuid.Nil)
	f(nil, EntityDevice, d.DemoDeviceID, false, CodeAuthentication, uuid.Nil)

	msg := func(p *Principal, typ string, id uuid.UUID) string {
		_, err := te.AuthorizeEntity(ctx, p, typ, id, false)
		return err.Error()
	}
	if got := msg(admin, EntityDevice, unknown); got != "Device with requested id wasn't found!" {
		t.Errorf("unknown device: %q", got)
	}
	if got := msg(admin, "ASSET", unknown); got != "Unsupported entity type" {
		t.Errorf("bad type: %q", got)
	}
}

func TestEntityAccessOfGetters(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin, cust, sys := te.tenantAdmin(t), te.customerUser(t), te.sysadmin(t)
	other := te.newTenant(t, "B", "b@example.com")
	d := te.demo

	f := func(err error, code Code) {
		t.Helper()
		wantCode(t, err, code)
	}
	get := func(p *Principal, id uuid.UUID) error { _, err := te.GetDevice(ctx, p, id); return err }
	f(get(admin, d.DemoDeviceID), 0)
	f(get(cust, d.CustomerDeviceID), 0)
	f(get(cust, d.DemoDeviceID), CodePermissionDenied)
	f(get(other, d.DemoDeviceID), CodePermissionDenied)
	f(get(sys, d.DemoDeviceID), CodePermissionDenied)
	f(get(admin, uuid.New()), CodeItemNotFound)

	creds := func(p *Principal, id uuid.UUID) error { _, err := te.GetDeviceCredentials(ctx, p, id); return err }
	f(creds(cust, d.CustomerDeviceID), 0)
	f(creds(other, d.CustomerDeviceID), CodePermissionDenied)

	tenant := func(p *Principal, id uuid.UUID) error { _, err := te.GetTenant(ctx, p, id); return err }
	f(tenant(sys, d.DemoTenantID), 0)
	f(tenant(admin, d.DemoTenantID), 0)
	f(tenant(other, d.DemoTenantID), CodePermissionDenied)
	f(tenant(cust, d.DemoTenantID), CodePermissionDenied)
	f(tenant(sys, uuid.New()), CodeItemNotFound)

	customer := func(p *Principal, id uuid.UUID) error { _, err := te.GetCustomer(ctx, p, id); return err }
	f(customer(admin, d.DemoCustomerID), 0)
	f(customer(cust, d.DemoCustomerID), 0)
	f(customer(other, d.DemoCustomerID), CodePermissionDenied)
	f(customer(sys, d.DemoCustomerID), CodePermissionDenied)

	_, err := te.ListTenants(ctx, admin, PageLink{PageSize: 10})
	f(err, CodePermissionDenied)
	pd, err := te.ListTenants(ctx, sys, PageLink{PageSize: 10})
	if err != nil || pd.TotalElements != 2 {
		t.Fatalf("%+v %v", pd, err)
	}
	_, err = te.SaveTenant(ctx, admin, &Tenant{Title: "x"})
	f(err, CodePermissionDenied)
	_, err = te.SaveCustomer(ctx, admin, &Customer{Title: "Customer A"})
	f(err, CodeBadRequestParams) // title taken in the tenant
	_, err = te.SaveCustomer(ctx, other, &Customer{Title: "Customer A"})
	f(err, 0)
	cs, err := te.ListCustomers(ctx, admin, PageLink{PageSize: 10})
	if err != nil || cs.TotalElements != 1 {
		t.Fatalf("%+v %v", cs, err)
	}
}

func TestSaveUser(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin, cust, sys := te.tenantAdmin(t), te.customerUser(t), te.sysadmin(t)
	other := te.newTenant(t, "B", "b@example.com")
	d := te.demo
	f := func(p *Principal, u *User, code Code) *User {
		t.Helper()
		got, err := te.SaveUser(ctx, p, u)
		wantCode(t, err, code)
		return got
	}
	u := f(admin, &User{Email: "cu@example.com", Authority: CustomerUser, CustomerID: newEntityID(EntityCustomer, d.DemoCustomerID)}, 0)
	if u.TenantID.ID != d.DemoTenantID || u.CustomerID.ID != d.DemoCustomerID || u.Name != u.Email {
		t.Fatalf("%+v", u)
	}
	ta := f(admin, &User{Email: "ta@example.com", Authority: TenantAdmin, TenantID: newEntityID(EntityTenant, other.TenantID)}, 0)
	if ta.TenantID.ID != d.DemoTenantID || ta.CustomerID.ID != NullUUID {
		t.Fatalf("tenant admin placed in another tenant: %+v", ta)
	}
	f(admin, &User{Email: "CU@example.com", Authority: CustomerUser, CustomerID: newEntityID(EntityCustomer, d.DemoCustomerID)}, CodeBadRequestParams)
	f(admin, &User{Email: "x@example.com", Authority: SysAdmin}, CodePermissionDenied)
	f(other, &User{Email: "x@example.com", Authority: CustomerUser, CustomerID: newEntityID(EntityCustomer, d.DemoCustomerID)}, CodePermissionDenied)
	f(admin, &User{Email: "x@example.com", Authority: CustomerUser}, CodeBadRequestParams)
	f(admin, &User{Email: "not-an-email", Authority: TenantAdmin}, CodeBadRequestParams)
	f(admin, &User{Authority: TenantAdmin}, CodeBadRequestParams)
	f(admin, &User{Email: "x@example.com"}, CodeBadRequestParams)
	f(cust, &User{Email: "x@example.com", Authority: CustomerUser}, CodePermissionDenied)
	f(sys, &User{Email: "x@example.com", Authority: TenantAdmin, TenantID: newEntityID(EntityTenant, other.TenantID)}, 0)
	f(sys, &User{Email: "y@example.com", Authority: TenantAdmin, TenantID: newEntityID(EntityTenant, uuid.New())}, CodeBadRequestParams)
	f(sys, &User{Email: "y@example.com", Authority: TenantAdmin}, CodeBadRequestParams)
	// Updates stay within reach and keep the role.
	u.FirstName, u.Authority = "Ann", TenantAdmin
	up := f(admin, u, 0)
	if up.FirstName != "Ann" || up.Authority != CustomerUser || up.Version != 2 {
		t.Fatalf("%+v", up)
	}
	f(other, u, CodePermissionDenied)
}
