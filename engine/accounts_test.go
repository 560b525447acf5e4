package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

func TestDeleteTenantRemovesEverything(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	sys := te.sysadmin(t)
	b := te.newTenant(t, "B", "b@example.com")
	c, err := te.SaveCustomer(ctx, b, &Customer{Title: "BC"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := te.SaveDevice(ctx, b, &Device{Name: "bd", CustomerID: c.ID}, "B_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.SaveDeviceProfile(ctx, b, &DeviceProfile{Name: "extra"}); err != nil {
		t.Fatal(err)
	}
	cu, err := te.SaveUser(ctx, b, &User{Email: "bc@example.com", Authority: CustomerUser, CustomerID: c.ID})
	if err != nil {
		t.Fatal(err)
	}
	key, err := te.SaveAPIKey(ctx, b, &APIKeyRequest{Description: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.DeviceByToken(ctx, "B_TOKEN"); err != nil {
		t.Fatal(err)
	}
	pt := []storage.Row{{TenantID: b.TenantID, EntityID: d.ID.ID, Entry: kv.Entry{Key: "t", Ts: 1, Value: kv.LongValue(1)}}}
	if err := te.store.Write(ctx, pt); err != nil {
		t.Fatal(err)
	}
	if err := te.SaveAttributes(ctx, d.ID.ID, storage.ServerScope, []kv.Entry{{Key: "a", Value: kv.LongValue(1)}}); err != nil {
		t.Fatal(err)
	}

	if _, err := te.SaveRPCRule(ctx, b, &RPCRuleInput{Method: "m", Script: "return 1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := te.SaveView(ctx, b, &View{Name: "v", Source: ViewSource{DeviceProfile: "default"},
		Fields: []ViewField{{Label: "Device", Source: SourceEntityName}}}); err != nil {
		t.Fatal(err)
	}
	pkg := te.newTestOta(t, b, "fw", "1")
	if _, err := te.SaveOtaPackageData(ctx, b, pkg.ID.ID, OtaUpload{ChecksumAlgorithm: "MD5", FileName: "fw.bin",
		Data: strings.NewReader("firmware")}); err != nil {
		t.Fatal(err)
	}

	wantCode(t, te.DeleteTenant(ctx, te.tenantAdmin(t), b.TenantID), CodePermissionDenied)
	wantCode(t, te.DeleteTenant(ctx, sys, uuid.New()), CodeItemNotFound)
	wantCode(t, te.DeleteTenant(ctx, sys, b.TenantID), 0)
	wantCode(t, te.DeleteTenant(ctx, sys, b.TenantID), CodeItemNotFound)

	if _, err := te.store.Lookup(ctx, kindOtaData, otaDataKey(pkg.ID.ID)); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("OTA package bytes left: %v", err)
	}
	for _, kind := range []string{kindDevice, kindCredentials, kindCustomer, kindUser, kindUserCreds, kindProfile, kindAPIKey, kindOtaPackage, kindRPCRule, kindView} {
		if rs, err := te.store.List(ctx, kind, b.TenantID); err != nil || len(rs) != 0 {
			t.Errorf("%s left after delete: %d %v", kind, len(rs), err)
		}
	}
	if _, err := te.store.Get(ctx, kindUser, cu.ID.ID); err == nil {
		t.Error("customer user left")
	}
	if pts, _ := te.LatestTelemetry(ctx, d.ID.ID, nil); len(pts) != 0 {
		t.Errorf("telemetry left: %v", pts)
	}
	if attrs, _ := te.Attributes(ctx, d.ID.ID, storage.ServerScope, nil); len(attrs) != 0 {
		t.Errorf("attributes left: %v", attrs)
	}
	_, err = te.DeviceByToken(ctx, "B_TOKEN")
	wantCode(t, err, CodeAuthentication)
	_, err = te.Authenticate(ctx, "ApiKey "+*key.Value)
	wantCode(t, err, CodeAuthentication)
	_, err = te.CurrentUser(ctx, b)
	wantCode(t, err, CodeItemNotFound)
	// The demo tenant is untouched.
	if _, err := te.GetDevice(ctx, te.tenantAdmin(t), te.demo.DemoDeviceID); err != nil {
		t.Fatal(err)
	}
}

func TestAssignDevicesAndCustomerDelete(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin, cust := te.tenantAdmin(t), te.customerUser(t)
	other := te.newTenant(t, "B", "b@example.com")
	d := te.demo
	pl := PageLink{PageSize: 10}

	_, err := te.AssignDevice(ctx, cust, d.DemoCustomerID, d.DemoDeviceID)
	wantCode(t, err, CodePermissionDenied)
	_, err = te.AssignDevice(ctx, other, d.DemoCustomerID, d.DemoDeviceID)
	wantCode(t, err, CodePermissionDenied)
	_, err = te.AssignDevice(ctx, admin, uuid.New(), d.DemoDeviceID)
	wantCode(t, err, CodeItemNotFound)
	_, err = te.AssignDevice(ctx, admin, d.DemoCustomerID, uuid.New())
	wantCode(t, err, CodeItemNotFound)
	_, err = te.GetDevice(ctx, cust, d.DemoDeviceID)
	wantCode(t, err, CodePermissionDenied)
	dev, err := te.AssignDevice(ctx, admin, d.DemoCustomerID, d.DemoDeviceID)
	if err != nil || dev.CustomerID.ID != d.DemoCustomerID {
		t.Fatalf("assign: %+v %v", dev, err)
	}
	if _, err := te.GetDevice(ctx, cust, d.DemoDeviceID); err != nil {
		t.Fatal(err)
	}
	page, err := te.ListCustomerDevices(ctx, cust, d.DemoCustomerID, pl, "")
	if err != nil || page.TotalElements != 2 {
		t.Fatalf("customer devices: %+v %v", page, err)
	}
	_, err = te.ListCustomerDevices(ctx, other, d.DemoCustomerID, pl, "")
	wantCode(t, err, CodePermissionDenied)
	if _, err := te.UnassignDevice(ctx, admin, d.DemoDeviceID); err != nil {
		t.Fatal(err)
	}
	_, err = te.UnassignDevice(ctx, admin, d.DemoDeviceID)
	wantCode(t, err, CodeBadRequestParams)
	_, err = te.GetDevice(ctx, cust, d.DemoDeviceID)
	wantCode(t, err, CodePermissionDenied)

	users, err := te.ListCustomerUsers(ctx, admin, d.DemoCustomerID, pl)
	if err != nil || users.TotalElements != 1 || users.Data[0].Email != DemoCustomerUserEmail {
		t.Fatalf("customer users: %+v %v", users, err)
	}
	admins, err := te.ListTenantAdmins(ctx, te.sysadmin(t), d.DemoTenantID, pl)
	if err != nil || admins.TotalElements != 1 || admins.Data[0].Email != DemoTenantAdminEmail {
		t.Fatalf("tenant admins: %+v %v", admins, err)
	}
	_, err = te.ListTenantAdmins(ctx, other, d.DemoTenantID, pl)
	wantCode(t, err, CodePermissionDenied)

	// Deleting the customer deletes its users and unassigns its devices.
	wantCode(t, te.DeleteCustomer(ctx, other, d.DemoCustomerID), CodePermissionDenied)
	wantCode(t, te.DeleteCustomer(ctx, cust, d.DemoCustomerID), CodePermissionDenied)
	wantCode(t, te.DeleteCustomer(ctx, admin, d.DemoCustomerID), 0)
	dev, err = te.GetDevice(ctx, admin, d.CustomerDeviceID)
	if err != nil || !isNull(dev.CustomerID.ID) {
		t.Fatalf("device after customer delete: %+v %v", dev, err)
	}
	_, _, err = te.Login(ctx, DemoCustomerUserEmail, "customer")
	wantCode(t, err, CodeAuthentication)
	_, err = te.CurrentUser(ctx, cust)
	wantCode(t, err, CodeItemNotFound)
}

// TestTenantCustomerUpdateRace: an update of a tenant or customer overtaken by
// its deletion is 404 and does not bring the record back (a resurrected tenant
// would also stop its sweep); one overtaken by another update is 409 and
// leaves that update in place.
func TestTenantCustomerUpdateRace(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	sys := te.sysadmin(t)
	admin := te.tenantAdmin(t)
	overtake := te.overtaker()

	tn, err := te.SaveTenant(ctx, sys, &Tenant{Title: "raced"})
	if err != nil {
		t.Fatal(err)
	}
	// Edits without a version: these races are about writes over the version
	// read (a stale client version is TestStaleVersionIsConflict's).
	edit := func(title string) *Tenant { e := *tn; e.Title = title; e.Version = 0; return &e }
	overtake(func() {
		if _, err := te.SaveTenant(ctx, sys, edit("first")); err != nil {
			t.Error(err)
		}
	})
	_, err = te.SaveTenant(ctx, sys, edit("second"))
	wantCode(t, err, CodeVersionConflict)
	if got, err := te.GetTenant(ctx, sys, tn.ID.ID); err != nil || got.Title != "first" {
		t.Fatalf("tenant after the overtaken update: %+v %v", got, err)
	}
	overtake(func() { wantCode(t, te.DeleteTenant(ctx, sys, tn.ID.ID), 0) })
	_, err = te.SaveTenant(ctx, sys, edit("back"))
	wantCode(t, err, CodeItemNotFound)
	if _, err := te.store.Get(ctx, kindTenant, tn.ID.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("deleted tenant brought back: %v", err)
	}

	c, err := te.SaveCustomer(ctx, admin, &Customer{Title: "raced customer"})
	if err != nil {
		t.Fatal(err)
	}
	overtake(func() { wantCode(t, te.DeleteCustomer(ctx, admin, c.ID.ID), 0) })
	back := *c
	back.Title = "back"
	_, err = te.SaveCustomer(ctx, admin, &back)
	wantCode(t, err, CodeItemNotFound)
	if _, err := te.store.Get(ctx, kindCustomer, c.ID.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("deleted customer brought back: %v", err)
	}
	// The title of the customer that was not brought back is free again.
	if _, err := te.SaveCustomer(ctx, admin, &Customer{Title: "back"}); err != nil {
		t.Fatal(err)
	}
}

// TestUserFieldLengths: names and phone are at most 255 characters (the names
// go into every access token), additionalInfo at most 64 KiB, on create and
// update, with ThingsBoard's message.
func TestUserFieldLengths(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	long := strings.Repeat("n", 256)
	bigInfo := []byte(`{"note":"` + strings.Repeat("i", maxAdditionalInfo) + `"}`)
	u, err := te.SaveUser(ctx, admin, &User{Email: "names@example.com", Authority: TenantAdmin,
		FirstName: strings.Repeat("é", 255), LastName: "L", AdditionalInfo: []byte(`{"description":"ok"}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		edit func(*User)
		msg  string
	}{
		{func(u *User) { u.FirstName = long }, "Validation error: first name length must be equal or less than 255"},
		{func(u *User) { u.LastName = long }, "Validation error: last name length must be equal or less than 255"},
		{func(u *User) { u.Phone = long }, "Validation error: phone length must be equal or less than 255"},
		{func(u *User) { u.AdditionalInfo = bigInfo }, "Validation error: additional info length must be equal or less than 65536 bytes"},
	} {
		created := &User{Email: "new@example.com", Authority: TenantAdmin}
		tc.edit(created)
		_, err := te.SaveUser(ctx, admin, created)
		wantMsg(t, err, CodeBadRequestParams, tc.msg)
		updated := *u
		tc.edit(&updated)
		_, err = te.SaveUser(ctx, admin, &updated)
		wantMsg(t, err, CodeBadRequestParams, tc.msg)
	}
	if _, err := lookupRecord[User](ctx, te.Engine, kindUser, emailKey("new@example.com")); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("refused user stored: %v", err)
	}
	if got, err := te.GetUser(ctx, admin, u.ID.ID); err != nil || got.FirstName != u.FirstName || got.Version != u.Version {
		t.Fatalf("refused update stored: %+v %v", got, err)
	}
}

// TestCustomerUserPeers: as ThingsBoard's CustomerUserPermissions, a customer
// user reads the users of its customer, lists them, and updates itself only.
func TestCustomerUserPeers(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	cu := te.customerUser(t)
	peer, err := te.SaveUser(ctx, a, &User{Email: "peer@example.com", Authority: CustomerUser, CustomerID: newEntityID(EntityCustomer, te.demo.DemoCustomerID)})
	if err != nil {
		t.Fatal(err)
	}
	other, err := te.SaveCustomer(ctx, a, &Customer{Title: "Other"})
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := te.SaveUser(ctx, a, &User{Email: "stranger@example.com", Authority: CustomerUser, CustomerID: other.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.GetUser(ctx, cu, peer.ID.ID); err != nil {
		t.Fatalf("a peer: %v", err)
	}
	_, err = te.GetUser(ctx, cu, stranger.ID.ID)
	wantCode(t, err, CodePermissionDenied)
	_, err = te.GetUser(ctx, cu, a.UserID)
	wantCode(t, err, CodePermissionDenied)

	page, err := te.ListUsers(ctx, cu, PageLink{PageSize: 10, SortProperty: "email"})
	if err != nil || page.TotalElements != 2 || page.Data[0].Email != DemoCustomerUserEmail || page.Data[1].Email != "peer@example.com" {
		t.Fatalf("customer's users: %+v %v", page, err)
	}
	page, err = te.ListUsers(ctx, a, PageLink{PageSize: 10})
	if err != nil || page.TotalElements != 4 {
		t.Fatalf("tenant's users: %d %v", page.TotalElements, err)
	}
	_, err = te.ListUsers(ctx, te.sysadmin(t), PageLink{PageSize: 10})
	wantCode(t, err, CodePermissionDenied)

	self, err := te.GetUser(ctx, cu, cu.UserID)
	if err != nil {
		t.Fatal(err)
	}
	self.FirstName, self.Authority = "Renamed", TenantAdmin
	if got, err := te.SaveUser(ctx, cu, self); err != nil || got.FirstName != "Renamed" || got.Authority != CustomerUser {
		t.Fatalf("self update: %+v %v", got, err)
	}
	peer.FirstName = "x"
	_, err = te.SaveUser(ctx, cu, peer)
	wantCode(t, err, CodePermissionDenied)
	_, err = te.SaveUser(ctx, cu, &User{Email: "new@example.com", Authority: CustomerUser, CustomerID: newEntityID(EntityCustomer, te.demo.DemoCustomerID)})
	wantCode(t, err, CodePermissionDenied)
}
