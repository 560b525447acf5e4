package engine

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"testing"

	"github.com/google/uuid"
)

// Tests of the device and customer API's agreement with ThingsBoard found by
// an audit: the Java each one follows is named in the code under test.

// wantAuditMsg is wantMsg (apikeys_test.go) that also checks err.Error().
func wantAuditMsg(t *testing.T, err error, code Code, msg string) {
	t.Helper()
	wantCode(t, err, code)
	var ee *Error
	errors.As(err, &ee)
	if ee.Msg != msg || err.Error() != msg {
		t.Fatalf("message %q (%q), want %q", ee.Msg, err.Error(), msg)
	}
}

func TestCustomerTitleConflictPolicy(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	acme, err := te.SaveCustomer(ctx, a, &Customer{Title: "Acme"})
	if err != nil {
		t.Fatal(err)
	}
	save := func(c *Customer, names NameConflict) (*Customer, error) {
		t.Helper()
		return te.SaveCustomerWithPolicy(ctx, a, c, names)
	}
	_, err = save(&Customer{Title: "Acme"}, NameConflict{})
	wantAuditMsg(t, err, CodeBadRequestParams, "Customer with such title already exists!")

	inc := NameConflict{Uniquify: true, Incremental: true, Separator: "-"}
	for _, want := range []string{"Acme-1", "Acme-2"} {
		c, err := save(&Customer{Title: "Acme"}, inc)
		if err != nil || c.Title != want || c.Name != want {
			t.Fatalf("incremental: %+v %v, want %s", c, err, want)
		}
	}
	c, err := save(&Customer{Title: "Acme"}, NameConflict{Uniquify: true})
	if err != nil || !regexp.MustCompile(`^Acme_[A-Za-z0-9]{6}$`).MatchString(c.Title) {
		t.Fatalf("random: %+v %v", c, err)
	}
	// A free title is kept as it is.
	if c, err := save(&Customer{Title: "Fresh"}, inc); err != nil || c.Title != "Fresh" {
		t.Fatalf("free title: %+v %v", c, err)
	}
	// An update keeping its own title is no conflict; one taking another's is
	// uniquified (its own title does not count as taken).
	acme.Email = "acme@example.com"
	up, err := save(acme, inc)
	if err != nil || up.Title != "Acme" || up.Version != 2 {
		t.Fatalf("update: %+v %v", up, err)
	}
	up.Title = "Fresh"
	if up, err = save(up, inc); err != nil || up.Title != "Fresh-1" || up.ID != acme.ID {
		t.Fatalf("rename: %+v %v", up, err)
	}
	// Customer users may not save customers, whatever the policy.
	_, err = te.SaveCustomerWithPolicy(ctx, te.customerUser(t), &Customer{Title: "Y"}, inc)
	wantCode(t, err, CodePermissionDenied)
}

func TestCustomerByTitleAndNotFoundByID(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	b := te.newTenant(t, "B", "b@example.com")
	c, err := te.SaveCustomer(ctx, a, &Customer{Title: "Zeta Corp"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := te.TenantCustomerByTitle(ctx, a, "Zeta Corp")
	if err != nil || got.ID != c.ID {
		t.Fatalf("by title: %+v %v", got, err)
	}
	_, err = te.TenantCustomerByTitle(ctx, a, "zeta corp") // exact, as ThingsBoard's findByTenantIdAndTitle
	wantAuditMsg(t, err, CodeItemNotFound, "Customer with title [zeta corp] is not found")
	_, err = te.TenantCustomerByTitle(ctx, b, "Zeta Corp") // another tenant's
	wantAuditMsg(t, err, CodeItemNotFound, "Customer with title [Zeta Corp] is not found")
	_, err = te.TenantCustomerByTitle(ctx, te.customerUser(t), "Zeta Corp")
	wantCode(t, err, CodePermissionDenied)

	unknown := uuid.New()
	want := "Customer with id [" + unknown.String() + "] is not found"
	_, err = te.GetCustomer(ctx, a, unknown)
	wantAuditMsg(t, err, CodeItemNotFound, want)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("not ErrNotFound to errors.Is: %v", err)
	}
	wantAuditMsg(t, te.DeleteCustomer(ctx, a, unknown), CodeItemNotFound, want)
	_, err = te.SaveCustomer(ctx, a, &Customer{ID: newEntityID(EntityCustomer, unknown), Title: "ghost"})
	wantAuditMsg(t, err, CodeItemNotFound, want)
	_, err = te.AssignDevice(ctx, a, unknown, te.demo.DemoDeviceID)
	wantAuditMsg(t, err, CodeItemNotFound, want)
	// By-ids reads still leave unknown ids out.
	list, err := te.CustomersByIDs(ctx, a, []uuid.UUID{unknown, c.ID.ID})
	if err != nil || len(list) != 1 || list[0].ID != c.ID {
		t.Fatalf("by ids: %+v %v", list, err)
	}
}

func TestDeviceNotFoundByID(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	unknown := uuid.New()
	want := "Device with id [" + unknown.String() + "] is not found"

	_, err := te.GetDeviceByID(ctx, a, unknown)
	wantAuditMsg(t, err, CodeItemNotFound, want)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("not ErrNotFound to errors.Is: %v", err)
	}
	_, err = te.GetDeviceInfo(ctx, a, unknown)
	wantAuditMsg(t, err, CodeItemNotFound, want)
	wantAuditMsg(t, te.DeleteDevice(ctx, a, unknown), CodeItemNotFound, want)
	_, err = te.SaveDevice(ctx, a, &Device{ID: newEntityID(EntityDevice, unknown), Name: "ghost"}, "")
	wantAuditMsg(t, err, CodeItemNotFound, want)
	_, err = te.SaveDeviceWithCredentials(ctx, a, &Device{ID: newEntityID(EntityDevice, unknown), Name: "ghost"},
		&DeviceCredentials{CredentialsType: CredentialsAccessToken, CredentialsID: "GHOST"}, NameConflict{})
	wantAuditMsg(t, err, CodeItemNotFound, want)
	_, err = te.GetDeviceCredentials(ctx, a, unknown)
	wantAuditMsg(t, err, CodeItemNotFound, want)
	_, err = te.AssignDevice(ctx, a, te.demo.DemoCustomerID, unknown)
	wantAuditMsg(t, err, CodeItemNotFound, want)
	_, err = te.UnassignDevice(ctx, a, unknown)
	wantAuditMsg(t, err, CodeItemNotFound, want)

	// GetDevice keeps ErrNotFound itself: its callers word it (the RPC routes
	// as ThingsBoard's AccessValidator).
	if _, err := te.GetDevice(ctx, a, unknown); err != ErrNotFound {
		t.Fatalf("GetDevice: %v", err)
	}
	// A lookup by name keeps checkNotNull's default text.
	_, err = te.TenantDeviceByName(ctx, a, "nope")
	wantAuditMsg(t, err, CodeItemNotFound, "Requested item wasn't found!")
	// By-ids reads leave unknown ids out.
	list, err := te.DevicesByIDs(ctx, a, []uuid.UUID{unknown, te.demo.DemoDeviceID})
	if err != nil || len(list) != 1 {
		t.Fatalf("by ids: %+v %v", list, err)
	}
	// Another tenant's device is still 403, not 404.
	_, err = te.GetDeviceByID(ctx, te.newTenant(t, "B", "b@example.com"), te.demo.DemoDeviceID)
	wantCode(t, err, CodePermissionDenied)
}

func TestDeviceInfoTextSearchCompat(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	zeta, err := te.SaveCustomer(ctx, a, &Customer{Title: "Zeta Corp"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*Device{
		{Name: "d-zeta", Type: "pump", CustomerID: zeta.ID},
		{Name: "d-meter", Type: "WaterMeter"},
		{Name: "d-label", Type: "pump", Label: "ZETA wing"},
	} {
		if _, err := te.SaveDevice(ctx, a, d, ""); err != nil {
			t.Fatal(err)
		}
	}
	infoNames := func(pd PageData[*DeviceInfo], err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range pd.Data {
			out = append(out, d.Name)
		}
		slices.Sort(out)
		return out
	}
	tenantInfos := func(pl PageLink, f DeviceFilter) []string {
		t.Helper()
		return infoNames(te.ListTenantDeviceInfos(ctx, a, pl, f))
	}
	active := false
	for _, c := range []struct {
		pl   PageLink
		f    DeviceFilter
		want []string
	}{
		{PageLink{PageSize: 10, TextSearch: "zeta"}, DeviceFilter{}, []string{"d-label", "d-zeta"}},                              // customer title, label
		{PageLink{PageSize: 10, TextSearch: "METER"}, DeviceFilter{}, []string{"d-meter"}},                                       // type (and name)
		{PageLink{PageSize: 10, TextSearch: "waterm"}, DeviceFilter{}, []string{"d-meter"}},                                      // type only
		{PageLink{PageSize: 10, TextSearch: "corp"}, DeviceFilter{Active: &active}, []string{"d-zeta"}},                          // by state too
		{PageLink{PageSize: 10, TextSearch: "corp", SortProperty: "customerTitle"}, DeviceFilter{}, []string{"d-zeta"}},          // by state too
		{PageLink{PageSize: 1, TextSearch: "zeta", SortProperty: "name", SortOrder: "DESC"}, DeviceFilter{}, []string{"d-zeta"}}, // paged after the search
	} {
		if got := tenantInfos(c.pl, c.f); !slices.Equal(got, c.want) {
			t.Errorf("%+v %+v: %v, want %v", c.pl, c.f, got, c.want)
		}
	}
	pd, err := te.ListTenantDeviceInfos(ctx, a, PageLink{PageSize: 1, TextSearch: "zeta"}, DeviceFilter{})
	if err != nil || pd.TotalElements != 2 || pd.TotalPages != 2 || !pd.HasNext {
		t.Fatalf("page of a search: %+v %v", pd, err)
	}
	got := infoNames(te.ListCustomerDeviceInfos(ctx, a, zeta.ID.ID, PageLink{PageSize: 10, TextSearch: "zeta corp"}, DeviceFilter{}))
	if !slices.Equal(got, []string{"d-zeta"}) {
		t.Errorf("customer infos: %v", got)
	}
	// The plain device lists match name and label only.
	devs, err := te.ListTenantDevices(ctx, a, PageLink{PageSize: 10, TextSearch: "zeta"}, "")
	if err != nil || len(devs.Data) != 2 {
		t.Fatalf("tenant devices: %+v %v", devs, err)
	}
	if devs, err = te.ListTenantDevices(ctx, a, PageLink{PageSize: 10, TextSearch: "corp"}, ""); err != nil || len(devs.Data) != 0 {
		t.Fatalf("tenant devices by customer title: %+v %v", devs.Data, err)
	}
	if devs, err = te.ListCustomerDevices(ctx, a, zeta.ID.ID, PageLink{PageSize: 10, TextSearch: "pump"}, ""); err != nil || len(devs.Data) != 0 {
		t.Fatalf("customer devices by type: %+v %v", devs.Data, err)
	}
}

func TestDeviceFilterBlankTypeCompat(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	meter, err := te.SaveDevice(ctx, a, &Device{Name: "m", Type: "meter"}, "")
	if err != nil {
		t.Fatal(err)
	}
	pump, err := te.SaveDevice(ctx, a, &Device{Name: "p", Type: "pump", CustomerID: newEntityID(EntityCustomer, te.demo.DemoCustomerID)}, "")
	if err != nil {
		t.Fatal(err)
	}
	all, err := te.ListTenantDeviceInfos(ctx, a, PageLink{PageSize: 100}, DeviceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	infos := func(f DeviceFilter) int {
		t.Helper()
		pd, err := te.ListTenantDeviceInfos(ctx, a, PageLink{PageSize: 100}, f)
		if err != nil {
			t.Fatal(err)
		}
		return pd.TotalElements
	}
	if n := infos(DeviceFilter{Type: " \t"}); n != all.TotalElements {
		t.Errorf("blank type: %d, want all %d", n, all.TotalElements)
	}
	if n := infos(DeviceFilter{Type: " ", ProfileID: pump.DeviceProfileID.ID}); n != 1 {
		t.Errorf("blank type and a profile: %d, want 1", n)
	}
	// With both, the type counts and the profile is ignored.
	pd, err := te.ListTenantDeviceInfos(ctx, a, PageLink{PageSize: 100}, DeviceFilter{Type: "meter", ProfileID: pump.DeviceProfileID.ID})
	if err != nil || pd.TotalElements != 1 || pd.Data[0].ID != meter.ID {
		t.Fatalf("type and profile: %+v %v", pd, err)
	}
	pd, err = te.ListCustomerDeviceInfos(ctx, a, te.demo.DemoCustomerID, PageLink{PageSize: 100}, DeviceFilter{Type: "pump", ProfileID: meter.DeviceProfileID.ID})
	if err != nil || pd.TotalElements != 1 || pd.Data[0].ID != pump.ID {
		t.Fatalf("customer: type and profile: %+v %v", pd, err)
	}
	devs, err := te.ListTenantDevices(ctx, a, PageLink{PageSize: 100}, "  ")
	if err != nil || devs.TotalElements != all.TotalElements {
		t.Fatalf("tenant devices, blank type: %d %v", devs.TotalElements, err)
	}
	cust, err := te.ListCustomerDevices(ctx, a, te.demo.DemoCustomerID, PageLink{PageSize: 100}, " ")
	if err != nil || cust.TotalElements != 2 { // the demo's customer device and p
		t.Fatalf("customer devices, blank type: %d %v", cust.TotalElements, err)
	}
}

func TestPageLinkCompat(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	list := func(pl PageLink) (PageData[*Device], error) {
		return te.ListTenantDevices(ctx, a, pl, "")
	}
	for _, c := range []struct {
		pl  PageLink
		msg string
	}{
		{PageLink{PageSize: 0}, "Incorrect page link page size '0'. Page size must be greater than zero."},
		{PageLink{PageSize: -5}, "Incorrect page link page size '-5'. Page size must be greater than zero."},
		{PageLink{PageSize: 1, Page: -1}, "Incorrect page link page '-1'. Page must be positive integer."},
		{PageLink{PageSize: 1, SortProperty: "name", SortOrder: "up"}, "Unsupported sort order 'up'! Only 'ASC' or 'DESC' types are allowed."},
		{PageLink{PageSize: 1, SortProperty: "name;drop"}, "Invalid sort property"},
		{PageLink{PageSize: 1, SortProperty: "a.b"}, "Invalid sort property"},
		{PageLink{PageSize: 1, SortProperty: "nosuch"}, "Invalid sort property: nosuch"},
		// ThingsBoard's order: the controller's checks before the DAO's.
		{PageLink{PageSize: 0, Page: -1, SortProperty: "name", SortOrder: "up"}, "Unsupported sort order 'up'! Only 'ASC' or 'DESC' types are allowed."},
		{PageLink{PageSize: 0, SortProperty: "a b", SortOrder: "up"}, "Invalid sort property"},
		{PageLink{PageSize: 0, Page: -1}, "Incorrect page link page size '0'. Page size must be greater than zero."},
		{PageLink{PageSize: 0, SortOrder: "up"}, "Incorrect page link page size '0'. Page size must be greater than zero."},
	} {
		_, err := list(c.pl)
		wantAuditMsg(t, err, CodeBadRequestParams, c.msg)
	}
	// A sortOrder without a sortProperty is ignored.
	base, err := list(PageLink{PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, order := range []string{"up", "DESC", "desc"} {
		pd, err := list(PageLink{PageSize: 100, SortOrder: order})
		if err != nil || !slices.EqualFunc(pd.Data, base.Data, func(x, y *Device) bool { return x.ID == y.ID }) {
			t.Fatalf("sortOrder %s alone: %v", order, err)
		}
	}
	// id, ThingsBoard's default sort, is a sort property of every list.
	for _, order := range []string{"", "ASC", "DESC"} {
		pd, err := list(PageLink{PageSize: 100, SortProperty: "id", SortOrder: order})
		if err != nil || len(pd.Data) < 2 {
			t.Fatalf("id %s: %+v %v", order, pd, err)
		}
		ids := make([]string, len(pd.Data))
		for i, d := range pd.Data {
			ids[i] = d.ID.ID.String()
		}
		sorted := slices.Sorted(slices.Values(ids))
		if order == "DESC" {
			slices.Reverse(sorted)
		}
		if !slices.Equal(ids, sorted) {
			t.Errorf("id %s: %v", order, ids)
		}
	}
	if _, err := te.ListCustomers(ctx, a, PageLink{PageSize: 10, SortProperty: "id", SortOrder: "DESC"}); err != nil {
		t.Fatal(err)
	}
	if _, err := te.ListTenantDeviceInfos(ctx, a, PageLink{PageSize: 10, SortProperty: "id"}, DeviceFilter{}); err != nil {
		t.Fatal(err)
	}
	if _, err := te.ListDeviceProfiles(ctx, a, PageLink{PageSize: 10, SortProperty: "id"}); err != nil {
		t.Fatal(err)
	}
	if _, err := te.ListTenants(ctx, te.sysadmin(t), PageLink{PageSize: 10, SortProperty: "id"}); err != nil {
		t.Fatal(err)
	}
	if _, err := te.ListUsers(ctx, a, PageLink{PageSize: 10, SortProperty: "id"}); err != nil {
		t.Fatal(err)
	}
}

func TestDeviceCredentialsTakenMessage(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	const msg = "Device credentials are already assigned to another device!"
	_, err := te.SaveDevice(ctx, a, &Device{Name: "dup"}, DemoDeviceToken)
	wantAuditMsg(t, err, CodeBadRequestParams, msg)
	d, err := te.SaveDevice(ctx, a, &Device{Name: "mine"}, "MINE")
	if err != nil {
		t.Fatal(err)
	}
	_, err = te.SaveDeviceCredentials(ctx, a, &DeviceCredentials{DeviceID: d.ID, CredentialsType: CredentialsAccessToken, CredentialsID: DemoDeviceToken})
	wantAuditMsg(t, err, CodeBadRequestParams, msg)
	_, err = te.SaveDeviceWithCredentials(ctx, a, d, &DeviceCredentials{CredentialsType: CredentialsAccessToken, CredentialsID: DemoDeviceToken}, NameConflict{})
	wantAuditMsg(t, err, CodeBadRequestParams, msg)
	_, err = te.SaveDeviceWithCredentials(ctx, a, &Device{Name: "new"}, &DeviceCredentials{CredentialsType: CredentialsAccessToken, CredentialsID: DemoDeviceToken}, NameConflict{})
	wantAuditMsg(t, err, CodeBadRequestParams, msg)
	// Its own token again is no conflict.
	if _, err := te.SaveDeviceCredentials(ctx, a, &DeviceCredentials{DeviceID: d.ID, CredentialsType: CredentialsAccessToken, CredentialsID: "MINE"}); err != nil {
		t.Fatal(err)
	}
}

func TestAssignDeviceSameCustomerUnchanged(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	cust := te.demo.DemoCustomerID
	d, err := te.SaveDevice(ctx, a, &Device{Name: "x"}, "")
	if err != nil {
		t.Fatal(err)
	}
	first, err := te.AssignDevice(ctx, a, cust, d.ID.ID)
	if err != nil || first.Version != d.Version+1 || first.CustomerID.ID != cust {
		t.Fatalf("assign: %+v %v", first, err)
	}
	again, err := te.AssignDevice(ctx, a, cust, d.ID.ID)
	if err != nil || again.Version != first.Version || again.CustomerID.ID != cust {
		t.Fatalf("assign again: %+v %v", again, err)
	}
	stored, err := te.GetDevice(ctx, a, d.ID.ID)
	if err != nil || stored.Version != first.Version {
		t.Fatalf("stored: %+v %v", stored, err)
	}
	// Another customer is a change.
	other, err := te.SaveCustomer(ctx, a, &Customer{Title: "Other"})
	if err != nil {
		t.Fatal(err)
	}
	moved, err := te.AssignDevice(ctx, a, other.ID.ID, d.ID.ID)
	if err != nil || moved.Version != first.Version+1 || moved.CustomerID.ID != other.ID.ID {
		t.Fatalf("move: %+v %v", moved, err)
	}
}

func TestAssignDeviceToPublicCustomer(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	_, err := te.AssignDeviceToPublicCustomer(ctx, a, te.demo.DemoDeviceID)
	wantAuditMsg(t, err, CodeBadRequestParams, errNoPublicCustomer.Msg)
	_, err = te.AssignDeviceToPublicCustomer(ctx, te.customerUser(t), te.demo.DemoDeviceID)
	wantCode(t, err, CodePermissionDenied)
	_, err = te.AssignDeviceToPublicCustomer(ctx, te.newTenant(t, "B", "b@example.com"), te.demo.DemoDeviceID)
	wantCode(t, err, CodePermissionDenied)
	unknown := uuid.New()
	_, err = te.AssignDeviceToPublicCustomer(ctx, a, unknown)
	wantAuditMsg(t, err, CodeItemNotFound, "Device with id ["+unknown.String()+"] is not found")
	// Nothing changed.
	d, err := te.GetDevice(ctx, a, te.demo.DemoDeviceID)
	if err != nil || !isNull(d.CustomerID.ID) {
		t.Fatalf("device: %+v %v", d, err)
	}
}

// TestSortByID: every list takes sortProperty=id, ThingsBoard's default sort.
func TestSortByID(t *testing.T) {
	for name, ok := range map[string]bool{
		"tenants": tenantPages.keys["id"] != nil, "customers": customerPages.keys["id"] != nil,
		"deviceProfiles": profilePages.keys["id"] != nil, "devices": devicePages.keys["id"] != nil,
		"users": userPages.keys["id"] != nil, "apiKeys": apiKeyPages.keys["id"] != nil,
		"ota": otaPages.keys["id"] != nil, "rpc": rpcPages.keys["id"] != nil, "views": viewPages.keys["id"] != nil,
		"tenantProfiles": tenantProfilePages.keys["id"] != nil, "tenantProfileInfos": tenantProfileInfoPages.keys["id"] != nil,
		"deviceInfos": deviceInfoPages.keys["id"] != nil,
	} {
		if !ok {
			t.Errorf("%s: no id sort", name)
		}
	}
}
