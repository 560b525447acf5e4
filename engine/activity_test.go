package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// serverAttr returns the SERVER_SCOPE attribute key of a device as read over
// the API (nil: absent).
func serverAttr(t *testing.T, te *testEngine, d *Device, key string, keys []string) *kv.Entry {
	t.Helper()
	attrs, err := te.Attributes(context.Background(), d.ID.ID, storage.ServerScope, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i := range attrs {
		if attrs[i].Key == key {
			return &attrs[i]
		}
	}
	return nil
}

func TestDeviceActivity(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	clock := time.Now()
	te.now = func() time.Time { return clock }
	d, err := te.SaveDevice(ctx, a, &Device{Name: "act"}, "ACT_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	wantActive := func(want bool, ts int64) {
		t.Helper()
		got := serverAttr(t, te, d, attrActive, nil)
		if got == nil || got.Value != kv.BoolValue(want) || got.Ts != ts {
			t.Fatalf("active = %+v, want %v at %d", got, want, ts)
		}
	}
	// A device that never made a request is inactive since its creation.
	wantActive(false, d.CreatedTime)
	if info, err := te.GetDeviceInfo(ctx, a, d.ID.ID); err != nil || info.Active || info.DeviceProfileName != d.Type {
		t.Fatalf("info %+v %v", info, err)
	}

	// A request makes it active at once on this node, before the write.
	if _, err := te.DeviceByToken(ctx, "ACT_TOKEN"); err != nil {
		t.Fatal(err)
	}
	seen := clock.UnixMilli()
	wantActive(true, seen)
	if info, err := te.GetDeviceInfo(ctx, a, d.ID.ID); err != nil || !info.Active {
		t.Fatalf("info %+v %v", info, err)
	}
	te.flushActivity(ctx)
	if got := serverAttr(t, te, d, attrLastActivityTime, nil); got == nil || got.Value != kv.LongValue(seen) {
		t.Fatalf("lastActivityTime = %+v, want %d", got, seen)
	}

	// Ten minutes of silence (the default timeout) end it.
	clock = clock.Add(10*time.Minute - time.Millisecond)
	wantActive(true, seen)
	clock = clock.Add(time.Millisecond)
	wantActive(false, seen+(10*time.Minute).Milliseconds())

	// The server attribute inactivityTimeout (ms) overrides the default.
	if err := te.SaveAttributes(ctx, d.ID.ID, storage.ServerScope, []kv.Entry{{Key: attrInactivityTimeout, Value: kv.LongValue(3_600_000)}}); err != nil {
		t.Fatal(err)
	}
	wantActive(true, seen)

	// Keys asked for: "active" only when named; the stored inputs only when named.
	if got := serverAttr(t, te, d, attrLastActivityTime, []string{attrActive}); got != nil {
		t.Fatalf("lastActivityTime read without being asked for: %+v", got)
	}
	if got := serverAttr(t, te, d, attrActive, []string{attrLastActivityTime}); got != nil {
		t.Fatalf("active read without being asked for: %+v", got)
	}
	if got := serverAttr(t, te, d, attrActive, []string{attrActive}); got == nil {
		t.Fatal("active not read when asked for")
	}
	// A stored "active" does not hide the derived one; other scopes have none.
	if err := te.SaveAttributes(ctx, d.ID.ID, storage.ServerScope, []kv.Entry{{Key: attrActive, Value: kv.StringValue("x")}}); err != nil {
		t.Fatal(err)
	}
	wantActive(true, seen)
	if attrs, _ := te.Attributes(ctx, d.ID.ID, storage.SharedScope, nil); len(attrs) != 0 {
		t.Fatalf("shared scope: %+v", attrs)
	}
	keys, err := te.AttributeKeys(ctx, d.ID.ID, storage.ServerScope)
	if err != nil || len(keys) != 3 || keys[0] != attrActive {
		t.Fatalf("keys %v %v", keys, err)
	}
}

func TestDeviceActivityWrittenAtClose(t *testing.T) {
	db := openDB(t)
	e := New(db, Config{JWTSigningKey: []byte("test-signing-key-0123456789abcdef")})
	ctx := context.Background()
	if _, err := e.Bootstrap(ctx, true, ""); err != nil {
		t.Fatal(err)
	}
	d, err := e.DeviceByToken(ctx, DemoDeviceToken)
	if err != nil {
		t.Fatal(err)
	}
	e.Close(ctx) // well before the writer's first tick
	attrs, err := db.GetAttributes(ctx, d.ID.ID, storage.ServerScope, []string{attrLastActivityTime})
	if err != nil || len(attrs) != 1 || attrs[0].Value.Long == 0 {
		t.Fatalf("lastActivityTime after Close: %+v %v", attrs, err)
	}
}

func TestDeviceInfoLists(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	cust, err := te.SaveCustomer(ctx, a, &Customer{Title: "Zeta"})
	if err != nil {
		t.Fatal(err)
	}
	var devs []*Device
	for i, n := range []string{"i1", "i2", "i3"} {
		d, err := te.SaveDevice(ctx, a, &Device{Name: n, Type: "meter"}, "INFO_"+n)
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			if d, err = te.AssignDevice(ctx, a, cust.ID.ID, d.ID.ID); err != nil {
				t.Fatal(err)
			}
		}
		devs = append(devs, d)
	}
	if _, err := te.DeviceByToken(ctx, "INFO_i2"); err != nil {
		t.Fatal(err)
	}
	names := func(p PageData[*DeviceInfo]) (out []string) {
		for _, i := range p.Data {
			out = append(out, i.Name)
		}
		return out
	}
	pl := PageLink{PageSize: 10, SortProperty: "name"}
	yes, no := true, false
	for _, c := range []struct {
		f    DeviceFilter
		pl   PageLink
		want string
	}{
		{DeviceFilter{Type: "meter"}, pl, "[i1 i2 i3]"},
		{DeviceFilter{Type: "meter", Active: &yes}, pl, "[i2]"},
		{DeviceFilter{Type: "meter", Active: &no}, pl, "[i1 i3]"},
		{DeviceFilter{ProfileID: devs[0].DeviceProfileID.ID}, PageLink{PageSize: 1, Page: 1, SortProperty: "name"}, "[i2]"},
		{DeviceFilter{Type: "meter"}, PageLink{PageSize: 10, SortProperty: "active", SortOrder: "DESC"}, "[i2 i1 i3]"},
		{DeviceFilter{Type: "meter"}, PageLink{PageSize: 10, SortProperty: "customerTitle"}, "[i3 i1 i2]"},
		{DeviceFilter{Type: "none"}, pl, "[]"},
	} {
		page, err := te.ListTenantDeviceInfos(ctx, a, c.pl, c.f)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(names(page)); got != c.want {
			t.Errorf("%+v %+v: %s, want %s", c.f, c.pl, got, c.want)
		}
	}
	page, err := te.ListCustomerDeviceInfos(ctx, a, cust.ID.ID, pl, DeviceFilter{})
	if err != nil || len(page.Data) != 1 || *page.Data[0].CustomerTitle != "Zeta" || page.Data[0].Active {
		t.Fatalf("customer infos %+v %v", page, err)
	}
	_, err = te.ListTenantDeviceInfos(ctx, te.customerUser(t), pl, DeviceFilter{})
	wantCode(t, err, CodePermissionDenied)

	// By ids: unknown and unseen ones are left out, a repeat is one.
	if _, err := te.AssignDevice(ctx, a, te.demo.DemoCustomerID, devs[0].ID.ID); err != nil {
		t.Fatal(err)
	}
	ids := []uuid.UUID{devs[2].ID.ID, devs[0].ID.ID, devs[2].ID.ID, uuid.New()}
	for _, c := range []struct {
		p    *Principal
		want string
	}{{a, "[i3 i1]"}, {te.customerUser(t), "[i1]"}, {te.newTenant(t, "B", "b@example.com"), "[]"}} {
		got, err := te.DevicesByIDs(ctx, c.p, ids)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, d := range got {
			n = append(n, d.Name)
		}
		if fmt.Sprint(n) != c.want {
			t.Errorf("%s: %v, want %s", c.p.Authority, n, c.want)
		}
	}
	types, err := te.DeviceTypes(ctx, a)
	if err != nil || fmt.Sprint(types) == "" || types[len(types)-1].Type != "meter" || types[0].EntityType != EntityDevice {
		t.Fatalf("types %+v %v", types, err)
	}
}

func TestNameConflictPolicy(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	save := func(d *Device, nc NameConflict) (*Device, error) {
		return te.SaveDeviceWithPolicy(ctx, a, d, "", nc)
	}
	if _, err := save(&Device{Name: "pump"}, NameConflict{}); err != nil {
		t.Fatal(err)
	}
	_, err := save(&Device{Name: "pump"}, NameConflict{})
	wantCode(t, err, CodeBadRequestParams) // FAIL
	inc := NameConflict{Uniquify: true, Incremental: true}
	for _, want := range []string{"pump_1", "pump_2"} {
		d, err := save(&Device{Name: "pump"}, inc)
		if err != nil || d.Name != want {
			t.Fatalf("%+v %v, want %s", d, err, want)
		}
	}
	d, err := save(&Device{Name: "pump"}, NameConflict{Uniquify: true, Separator: "-"})
	if err != nil || len(d.Name) != len("pump-")+6 || d.Name[:5] != "pump-" {
		t.Fatalf("random: %+v %v", d, err)
	}
	// An update to a taken name is renamed; its own name is no conflict.
	other, err := save(&Device{Name: "valve"}, NameConflict{})
	if err != nil {
		t.Fatal(err)
	}
	other.Name = "pump"
	if up, err := save(other, inc); err != nil || up.Name != "pump_3" {
		t.Fatalf("update: %+v %v", up, err)
	}
	// With credentials: the token given, the name uniquified.
	withCreds, err := te.SaveDeviceWithCredentials(ctx, a, &Device{Name: "pump"},
		&DeviceCredentials{CredentialsType: CredentialsAccessToken, CredentialsID: "PUMP_TOKEN"}, inc)
	if err != nil || withCreds.Name != "pump_4" {
		t.Fatalf("with credentials: %+v %v", withCreds, err)
	}
	if got, err := te.DeviceByToken(ctx, "PUMP_TOKEN"); err != nil || got.ID != withCreds.ID {
		t.Fatalf("token: %+v %v", got, err)
	}
	withCreds.Label = "L"
	if up, err := te.SaveDeviceWithCredentials(ctx, a, withCreds,
		&DeviceCredentials{CredentialsType: CredentialsAccessToken, CredentialsID: "PUMP_TOKEN_2"}, NameConflict{}); err != nil || up.Label != "L" {
		t.Fatalf("update with credentials: %+v %v", up, err)
	}
	if _, err := te.DeviceByToken(ctx, "PUMP_TOKEN"); err == nil {
		t.Fatal("old token still works")
	}
	// A token another device holds fails the request before the device changes.
	withCreds.Label = "not kept"
	_, err = te.SaveDeviceWithCredentials(ctx, a, withCreds,
		&DeviceCredentials{CredentialsType: CredentialsAccessToken, CredentialsID: DemoDeviceToken}, NameConflict{})
	wantCode(t, err, CodeBadRequestParams)
	if got, _ := te.GetDevice(ctx, a, withCreds.ID.ID); got.Label != "L" {
		t.Fatalf("label %q after a refused save", got.Label)
	}
	_, err = te.SaveDeviceWithCredentials(ctx, a, &Device{Name: "x"}, nil, NameConflict{})
	wantCode(t, err, CodeBadRequestParams)
	_, err = te.SaveDeviceWithCredentials(ctx, a, &Device{Name: "x"}, &DeviceCredentials{CredentialsType: "X509_CERTIFICATE", CredentialsID: "a"}, NameConflict{})
	wantCode(t, err, CodeBadRequestParams)
}

// TestDeviceActivityManyDevices: a flush writes every noted device, across
// several batches of activityBatch.
func TestDeviceActivityManyDevices(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	ids := make([]uuid.UUID, 5000)
	for i := range ids {
		ids[i] = uuid.New()
		te.noteActivity(ids[i], int64(1000+i))
	}
	te.flushActivity(ctx)
	for _, i := range []int{0, 999, 1000, 4999} {
		attrs, err := te.store.GetAttributes(ctx, ids[i], storage.ServerScope, []string{attrLastActivityTime})
		if err != nil || len(attrs) != 1 || attrs[0].Value.Long != int64(1000+i) {
			t.Fatalf("device %d: %+v %v", i, attrs, err)
		}
	}
	if ms := te.pendingActivity(ids[0]); ms != 0 {
		t.Fatalf("still pending after the flush: %d", ms)
	}
}
