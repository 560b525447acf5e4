package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

func TestSaveDeviceNamesAndProfiles(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	b := te.newTenant(t, "B", "b@example.com")

	d1, err := te.SaveDevice(ctx, a, &Device{Name: "d1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if d1.Type != DefaultProfileName || d1.ID.EntityType != EntityDevice || d1.DeviceProfileID.EntityType != EntityDeviceProfile ||
		d1.CustomerID.ID != NullUUID || d1.Tenant.ID != a.TenantID || d1.CreatedTime == 0 || string(d1.DeviceData) == "" {
		t.Fatalf("device: %+v", d1)
	}
	creds, err := te.GetDeviceCredentials(ctx, a, d1.ID.ID)
	if err != nil || len(creds.CredentialsID) != 20 || creds.CredentialsType != CredentialsAccessToken {
		t.Fatalf("generated credentials: %+v %v", creds, err)
	}

	f := func(p *Principal, d *Device, token string, code Code) {
		t.Helper()
		_, err := te.SaveDevice(ctx, p, d, token)
		wantCode(t, err, code)
	}
	f(a, &Device{Name: "d1"}, "", CodeBadRequestParams)                  // name taken in the tenant
	f(b, &Device{Name: "d1"}, "", 0)                                     // free in another tenant
	f(a, &Device{Name: ""}, "", CodeBadRequestParams)                    // name required
	f(a, &Device{Name: "d2"}, DemoDeviceToken, CodeBadRequestParams)     // token taken
	f(b, &Device{Name: "d2"}, DemoDeviceToken, CodeBadRequestParams)     // across tenants too
	f(a, &Device{Name: "d3"}, "has space", CodeBadRequestParams)         // unusable in a URL
	f(te.customerUser(t), &Device{Name: "d4"}, "", CodePermissionDenied) // tenant admins only
	f(te.sysadmin(t), &Device{Name: "d4"}, "", CodePermissionDenied)
	f(a, &Device{Name: "d5", CustomerID: newEntityID(EntityCustomer, uuid.New())}, "", CodeBadRequestParams)
	f(b, &Device{Name: "d5", CustomerID: newEntityID(EntityCustomer, te.demo.DemoCustomerID)}, "", CodeBadRequestParams)
	f(b, &Device{Name: "d6", DeviceProfileID: d1.DeviceProfileID}, "", CodeBadRequestParams) // A's profile
	f(b, &Device{ID: d1.ID, Name: "stolen"}, "", CodePermissionDenied)

	// An unknown type creates a profile of that name; a known one reuses it.
	th, err := te.SaveDevice(ctx, a, &Device{Name: "t1", Type: "thermostat"}, "TOKEN_T1")
	if err != nil || th.Type != "thermostat" {
		t.Fatalf("%+v %v", th, err)
	}
	th2, err := te.SaveDevice(ctx, a, &Device{Name: "t2", Type: "thermostat"}, "")
	if err != nil || th2.DeviceProfileID != th.DeviceProfileID {
		t.Fatalf("profile not reused: %+v %v", th2, err)
	}
	if got, err := te.TenantDeviceByName(ctx, a, "t1"); err != nil || got.ID != th.ID {
		t.Fatalf("by name: %v", err)
	}
	_, err = te.TenantDeviceByName(ctx, b, "t1")
	wantCode(t, err, CodeItemNotFound)

	// An update keeps the profile, the creation time and the token.
	th.Label = "kitchen"
	th.Type = ""
	up, err := te.SaveDevice(ctx, a, th, "IGNORED")
	if err != nil || up.DeviceProfileID != th2.DeviceProfileID || up.CreatedTime != th.CreatedTime || up.Version != 2 {
		t.Fatalf("update: %+v %v", up, err)
	}
	if d, err := te.DeviceByToken(ctx, "TOKEN_T1"); err != nil || d.Label != "kitchen" {
		t.Fatalf("token after update: %+v %v", d, err)
	}
	_, err = te.DeviceByToken(ctx, "IGNORED")
	wantCode(t, err, CodeAuthentication)

	// Renaming onto a taken name fails and changes nothing.
	up.Name = "d1"
	_, err = te.SaveDevice(ctx, a, up, "")
	wantCode(t, err, CodeBadRequestParams)
}

func TestTokenCacheInvalidation(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	d, err := te.SaveDevice(ctx, a, &Device{Name: "cached"}, "OLD_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.DeviceByToken(ctx, "OLD_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if _, ok := te.tokens.m.Load("OLD_TOKEN"); !ok {
		t.Fatal("token not cached")
	}

	creds, err := te.GetDeviceCredentials(ctx, a, d.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	creds.CredentialsID = "NEW_TOKEN"
	saved, err := te.SaveDeviceCredentials(ctx, a, creds)
	if err != nil || saved.ID != creds.ID || saved.Version != 2 {
		t.Fatalf("%+v %v", saved, err)
	}
	_, err = te.DeviceByToken(ctx, "OLD_TOKEN")
	wantCode(t, err, CodeAuthentication)
	if got, err := te.DeviceByToken(ctx, "NEW_TOKEN"); err != nil || got.ID != d.ID {
		t.Fatalf("new token: %v", err)
	}
	// The old token is free again; another device's token is not.
	if _, err := te.SaveDevice(ctx, a, &Device{Name: "other"}, "OLD_TOKEN"); err != nil {
		t.Fatal(err)
	}
	creds.CredentialsID = DemoDeviceToken
	_, err = te.SaveDeviceCredentials(ctx, a, creds)
	wantCode(t, err, CodeBadRequestParams)
	if _, err := te.DeviceByToken(ctx, "NEW_TOKEN"); err != nil {
		t.Fatal("failed change must keep the token")
	}

	f := func(p *Principal, c *DeviceCredentials, code Code) {
		t.Helper()
		_, err := te.SaveDeviceCredentials(ctx, p, c)
		wantCode(t, err, code)
	}
	f(te.customerUser(t), &DeviceCredentials{DeviceID: d.ID, CredentialsType: CredentialsAccessToken, CredentialsID: "X"}, CodePermissionDenied)
	f(a, &DeviceCredentials{DeviceID: d.ID, CredentialsType: "X509_CERTIFICATE", CredentialsID: "X"}, CodeBadRequestParams)
	f(a, &DeviceCredentials{DeviceID: d.ID, CredentialsType: CredentialsAccessToken}, CodeBadRequestParams)
	f(a, &DeviceCredentials{CredentialsType: CredentialsAccessToken, CredentialsID: "X"}, CodeBadRequestParams)
	f(a, &DeviceCredentials{DeviceID: newEntityID(EntityDevice, uuid.New()), CredentialsType: CredentialsAccessToken, CredentialsID: "X"}, CodeItemNotFound) // ThingsBoard's checkDeviceId
	f(te.newTenant(t, "B", "b@example.com"), &DeviceCredentials{DeviceID: d.ID, CredentialsType: CredentialsAccessToken, CredentialsID: "X"}, CodePermissionDenied)

	// Deleting the device refuses its token at once and removes its data.
	row := storage.Row{TenantID: a.TenantID, EntityID: d.ID.ID, Entry: kv.Entry{Ts: 1, Key: "t", Value: kv.LongValue(1)}}
	if err := te.store.Write(ctx, []storage.Row{row}); err != nil {
		t.Fatal(err)
	}
	if err := te.store.SaveAttributes(ctx, d.ID.ID, storage.ServerScope, []kv.Entry{row.Entry}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.DeleteDevice(ctx, te.customerUser(t), d.ID.ID), CodePermissionDenied)
	wantCode(t, te.DeleteDevice(ctx, a, d.ID.ID), 0)
	_, err = te.DeviceByToken(ctx, "NEW_TOKEN")
	wantCode(t, err, CodeAuthentication)
	if keys, err := te.store.SeriesKeys(ctx, d.ID.ID); err != nil || len(keys) != 0 {
		t.Fatalf("series left: %v %v", keys, err)
	}
	if attrs, err := te.store.GetAttributes(ctx, d.ID.ID, storage.ServerScope, nil); err != nil || len(attrs) != 0 {
		t.Fatalf("attributes left: %v %v", attrs, err)
	}
	_, err = te.GetDevice(ctx, a, d.ID.ID)
	wantCode(t, err, CodeItemNotFound)
	wantCode(t, te.DeleteDevice(ctx, a, d.ID.ID), CodeItemNotFound)
	// The name is free again.
	if _, err := te.SaveDevice(ctx, a, &Device{Name: "cached"}, ""); err != nil {
		t.Fatal(err)
	}
}

func TestTokenCacheTTL(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	if _, err := te.DeviceByToken(ctx, DemoDeviceToken); err != nil {
		t.Fatal(err)
	}
	// Another node changes the credentials behind this node's back.
	creds, err := te.credentialsOf(ctx, te.demo.DemoDeviceID)
	if err != nil {
		t.Fatal(err)
	}
	creds.CredentialsID = "CHANGED_ELSEWHERE"
	if err := te.putCredentials(ctx, te.demo.DemoTenantID, creds); err != nil {
		t.Fatal(err)
	}
	if _, err := te.DeviceByToken(ctx, DemoDeviceToken); err != nil {
		t.Fatal("within the TTL the cached entry serves")
	}
	base := te.now()
	te.now = func() time.Time { return base.Add(te.cfg.TokenCacheTTL + time.Second) }
	_, err = te.DeviceByToken(ctx, DemoDeviceToken)
	wantCode(t, err, CodeAuthentication)
}

func TestListTenantDevices(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	for _, n := range []string{"Alpha", "beta", "Gamma", "alphabet"} {
		if _, err := te.SaveDevice(ctx, a, &Device{Name: n, Type: "t-" + n[:1]}, ""); err != nil {
			t.Fatal(err)
		}
	}
	names := func(pd PageData[*Device]) []string {
		var out []string
		for _, d := range pd.Data {
			out = append(out, d.Name)
		}
		return out
	}
	f := func(pl PageLink, typ string, want []string, total, pages int, next bool) {
		t.Helper()
		pd, err := te.ListTenantDevices(ctx, a, pl, typ)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(pd); !slices.Equal(got, want) || pd.TotalElements != total || pd.TotalPages != pages || pd.HasNext != next {
			t.Errorf("%+v: got %v %d/%d/%v, want %v %d/%d/%v", pl, got, pd.TotalElements, pd.TotalPages, pd.HasNext, want, total, pages, next)
		}
	}
	// Demo: "Demo Device", "Customer Device" come first by creation time.
	f(PageLink{PageSize: 2}, "", []string{DemoDeviceName, DemoCustomerDeviceName}, 6, 3, true)
	f(PageLink{PageSize: 4, Page: 1}, "", []string{"Gamma", "alphabet"}, 6, 2, false)
	f(PageLink{PageSize: 10, Page: 5}, "", nil, 6, 1, false)
	f(PageLink{PageSize: 10, TextSearch: "ALPHA", SortProperty: "name"}, "", []string{"Alpha", "alphabet"}, 2, 1, false)
	f(PageLink{PageSize: 10, TextSearch: "a", SortProperty: "name", SortOrder: "DESC"}, "", []string{"Gamma", "beta", "alphabet", "Alpha"}, 4, 1, false)
	f(PageLink{PageSize: 10}, "t-b", []string{"beta"}, 1, 1, false)

	g := func(pl PageLink, p *Principal, code Code) {
		t.Helper()
		_, err := te.ListTenantDevices(ctx, p, pl, "")
		wantCode(t, err, code)
	}
	g(PageLink{PageSize: 0}, a, CodeBadRequestParams)
	g(PageLink{PageSize: 1, Page: -1}, a, CodeBadRequestParams)
	g(PageLink{PageSize: 1, SortProperty: "secret"}, a, CodeBadRequestParams)
	g(PageLink{PageSize: 1, SortProperty: "name", SortOrder: "up"}, a, CodeBadRequestParams)
	g(PageLink{PageSize: 1}, te.customerUser(t), CodePermissionDenied)

	other := te.newTenant(t, "B", "b@example.com")
	pd, err := te.ListTenantDevices(ctx, other, PageLink{PageSize: 10}, "")
	if err != nil || pd.TotalElements != 0 || pd.Data == nil {
		t.Fatalf("tenant B sees: %+v %v", pd, err)
	}
}

func TestDeviceProfiles(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	def, err := te.GetDefaultProfileInfo(ctx, a)
	if err != nil || def.Name != DefaultProfileName || def.Type != "DEFAULT" || def.TransportType != "DEFAULT" {
		t.Fatalf("%+v %v", def, err)
	}
	p, err := te.SaveDeviceProfile(ctx, a, &DeviceProfile{Name: "sensors"})
	if err != nil || p.Default || p.ProvisionType != ProvisionDisabled || p.ProfileData.ProvisionConfiguration.Type != ProvisionDisabled {
		t.Fatalf("%+v %v", p, err)
	}
	_, err = te.SaveDeviceProfile(ctx, a, &DeviceProfile{Name: "sensors"})
	wantCode(t, err, CodeBadRequestParams)
	_, err = te.SaveDeviceProfile(ctx, a, &DeviceProfile{})
	wantCode(t, err, CodeBadRequestParams)
	b := te.newTenant(t, "B", "b@example.com")
	if _, err := te.SaveDeviceProfile(ctx, b, &DeviceProfile{Name: "sensors"}); err != nil {
		t.Fatal(err)
	}
	_, err = te.GetDeviceProfile(ctx, b, p.ID.ID)
	wantCode(t, err, CodePermissionDenied)
	pd, err := te.ListDeviceProfiles(ctx, a, PageLink{PageSize: 10, SortProperty: "name"})
	if err != nil || pd.TotalElements != 2 || pd.Data[0].Name != DefaultProfileName {
		t.Fatalf("%+v %v", pd, err)
	}

	if _, err := te.SaveDevice(ctx, a, &Device{Name: "s1", DeviceProfileID: p.ID}, ""); err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.DeleteDeviceProfile(ctx, a, p.ID.ID), CodeBadRequestParams) // in use
	dp, _ := te.GetDeviceProfile(ctx, a, def.ID.ID)
	wantCode(t, te.DeleteDeviceProfile(ctx, a, dp.ID.ID), CodeBadRequestParams) // default
	unused, _ := te.SaveDeviceProfile(ctx, a, &DeviceProfile{Name: "unused"})
	wantCode(t, te.DeleteDeviceProfile(ctx, b, unused.ID.ID), CodePermissionDenied)
	wantCode(t, te.DeleteDeviceProfile(ctx, a, unused.ID.ID), 0)
	_, err = te.GetDeviceProfile(ctx, a, unused.ID.ID)
	wantCode(t, err, CodeItemNotFound)

	// A new tenant has its default profile from the start.
	tn, err := te.GetDefaultProfileInfo(ctx, b)
	if err != nil || tn.TenantID.ID != b.TenantID {
		t.Fatalf("%+v %v", tn, err)
	}
}

// TestTokenChangeUnderLoad checks that a token is refused as soon as its change
// returns, even while other requests keep resolving it.
func TestTokenChangeUnderLoad(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	creds, err := te.GetDeviceCredentials(ctx, a, te.demo.DemoDeviceID)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				te.DeviceByToken(ctx, "TOKEN_A")
				te.DeviceByToken(ctx, "TOKEN_B")
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	tokens := []string{"TOKEN_A", "TOKEN_B"}
	for i := range 40 {
		next, prev := tokens[i%2], tokens[(i+1)%2]
		creds.CredentialsID = next
		if creds, err = te.SaveDeviceCredentials(ctx, a, creds); err != nil {
			t.Fatal(err)
		}
		if _, err := te.DeviceByToken(ctx, prev); err == nil && i > 0 {
			t.Fatalf("round %d: old token %s still accepted", i, prev)
		}
		if _, err := te.DeviceByToken(ctx, next); err != nil {
			t.Fatalf("round %d: new token %s refused: %v", i, next, err)
		}
	}
}

// TestDeviceUpdateRace: an assignment overtaken by another write is made again
// over it, and one overtaken by the device's deletion is 404, not a device
// brought back without credentials.
func TestDeviceUpdateRace(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	d, err := te.SaveDevice(ctx, admin, &Device{Name: "raced"}, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := te.SaveCustomer(ctx, admin, &Customer{Title: "raced customer"})
	if err != nil {
		t.Fatal(err)
	}
	overtake := te.overtaker()

	// An assignment overtaken by a label edit keeps the label.
	overtake(func() {
		edit := *d
		edit.Label = "edited"
		if _, err := te.SaveDevice(ctx, admin, &edit, ""); err != nil {
			t.Error(err)
		}
	})
	got, err := te.AssignDevice(ctx, admin, c.ID.ID, d.ID.ID)
	if err != nil || got.Label != "edited" || got.CustomerID.ID != c.ID.ID {
		t.Fatalf("assignment overtaken by an edit: %+v, %v", got, err)
	}

	// An unassignment overtaken by the device's deletion is 404.
	overtake(func() {
		if err := te.DeleteDevice(ctx, admin, d.ID.ID); err != nil {
			t.Error(err)
		}
	})
	_, err = te.UnassignDevice(ctx, admin, d.ID.ID)
	wantCode(t, err, CodeItemNotFound)
	if _, err := te.GetDevice(ctx, admin, d.ID.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the deleted device is back: %v", err)
	}
}

// TestCredentialsChangeRacingDelete: new credentials for a device deleted
// meanwhile are not written (404), so no token works for a device that is gone.
func TestCredentialsChangeRacingDelete(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	d, err := te.SaveDevice(ctx, admin, &Device{Name: "doomed"}, "DOOMED_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	overtake := te.overtaker()
	overtake(func() { wantCode(t, te.DeleteDevice(ctx, admin, d.ID.ID), 0) })
	_, err = te.SaveDeviceCredentials(ctx, admin, &DeviceCredentials{DeviceID: d.ID, CredentialsType: CredentialsAccessToken, CredentialsID: "NEW_DOOMED_TOKEN"})
	wantCode(t, err, CodeItemNotFound)
	if _, err := te.DeviceByToken(ctx, "NEW_DOOMED_TOKEN"); err == nil {
		t.Fatal("a token of a deleted device works")
	}
	if rs, _ := te.store.List(ctx, kindCredentials, admin.TenantID); len(rs) != 2 { // the demo devices'
		t.Fatalf("%d credentials stored, want the 2 demo devices'", len(rs))
	}
}

// deleteHookStore runs hook once, after the first Delete of kind it passes on.
type deleteHookStore struct {
	storage.Backend
	kind string
	hook func()
}

func (s *deleteHookStore) Delete(ctx context.Context, kind string, id uuid.UUID) error {
	err := s.Backend.Delete(ctx, kind, id)
	if f := s.hook; f != nil && kind == s.kind {
		s.hook = nil
		f()
	}
	return err
}

// TestCredentialsChangeInsideDelete: a token change that runs after a device
// deletion removed the credentials but before it removed the device finds no
// credentials and writes new ones; the deletion must not leave them behind,
// or the token would be refused for every later device.
func TestCredentialsChangeInsideDelete(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	d, err := te.SaveDevice(ctx, admin, &Device{Name: "doomed"}, "")
	if err != nil {
		t.Fatal(err)
	}
	inner := te.store
	hooked := &deleteHookStore{Backend: inner, kind: kindCredentials}
	hooked.hook = func() {
		te.store = inner
		defer func() { te.store = hooked }()
		if _, err := te.SaveDeviceCredentials(ctx, admin, &DeviceCredentials{DeviceID: d.ID, CredentialsType: CredentialsAccessToken, CredentialsID: "IN_THE_GAP"}); err != nil {
			t.Errorf("token change in the gap: %v", err) // the device is still there: it succeeds
		}
	}
	te.store = hooked
	wantCode(t, te.DeleteDevice(ctx, admin, d.ID.ID), 0)
	te.store = inner
	if _, err := te.DeviceByToken(ctx, "IN_THE_GAP"); err == nil {
		t.Fatal("the token written in the gap works for a deleted device")
	}
	if _, err := te.SaveDevice(ctx, admin, &Device{Name: "heir"}, "IN_THE_GAP"); err != nil {
		t.Fatalf("token of a deleted device still taken: %v", err)
	}
}

// TestCredentialsChangeRacingDeleteLoop runs token changes and deletions at
// once: whichever wins, the token is free afterwards.
func TestCredentialsChangeRacingDeleteLoop(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	for i := range 60 {
		d, err := te.SaveDevice(ctx, admin, &Device{Name: "racer"}, "")
		if err != nil {
			t.Fatal(err)
		}
		token := "RACE_" + d.ID.ID.String()
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := te.DeleteDevice(ctx, admin, d.ID.ID); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			// Succeeds, or 404 once the device is gone.
			_, err := te.SaveDeviceCredentials(ctx, admin, &DeviceCredentials{DeviceID: d.ID, CredentialsType: CredentialsAccessToken, CredentialsID: token})
			var ee *Error
			if err != nil && !(errors.As(err, &ee) && ee.Code == CodeItemNotFound) {
				t.Error(err)
			}
		}()
		wg.Wait()
		heir, err := te.SaveDevice(ctx, admin, &Device{Name: "heir"}, token)
		if err != nil {
			t.Fatalf("round %d: token of a deleted device still taken: %v", i, err)
		}
		wantCode(t, te.DeleteDevice(ctx, admin, heir.ID.ID), 0)
	}
}

// TestSweepDropsCredentials: the sweep deletes credentials a deletion left
// behind (a node stopped half-way).
func TestSweepDropsCredentials(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	d, err := te.SaveDevice(ctx, admin, &Device{Name: "left"}, "LEFT_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.deleteRecord(ctx, kindDevice, d.ID.ID), 0) // only the record, as a crash would leave it
	te.sweepDevice(ctx, d.ID.ID)
	if _, err := te.SaveDevice(ctx, admin, &Device{Name: "heir"}, "LEFT_TOKEN"); err != nil {
		t.Fatalf("token still taken after the sweep: %v", err)
	}
}

// TestDeviceVersionConflict: a client's stale version is 409 as ThingsBoard's
// optimistic lock; no version overwrites.
func TestDeviceVersionConflict(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	d, err := te.SaveDevice(ctx, admin, &Device{Name: "versioned"}, "")
	if err != nil {
		t.Fatal(err)
	}
	a := *d
	a.Label = "a"
	if _, err := te.SaveDevice(ctx, admin, &a, ""); err != nil {
		t.Fatal(err)
	}
	b := *d // still the first version
	b.Label = "b"
	_, err = te.SaveDevice(ctx, admin, &b, "")
	wantCode(t, err, CodeVersionConflict)
	if err.Error() != "Device was already changed by someone else" {
		t.Fatalf("message %q", err)
	}
	b.Version = 0
	got, err := te.SaveDevice(ctx, admin, &b, "")
	if err != nil || got.Label != "b" || got.Version != d.Version+2 {
		t.Fatalf("update without a version: %+v %v", got, err)
	}
}

// TestListTenantDevicesLabelAndCustomer: textSearch matches the label too and
// customerTitle sorts by the customer's title, unassigned devices last, as
// ThingsBoard.
func TestListTenantDevicesLabelAndCustomer(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	zed, err := te.SaveCustomer(ctx, a, &Customer{Title: "zed"})
	if err != nil {
		t.Fatal(err)
	}
	abe, err := te.SaveCustomer(ctx, a, &Customer{Title: "Abe"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*Device{
		{Name: "q1", Label: "Boiler room", CustomerID: zed.ID},
		{Name: "q2", Label: "attic"},
		{Name: "boiler q", CustomerID: abe.ID},
	} {
		if _, err := te.SaveDevice(ctx, a, d, ""); err != nil {
			t.Fatal(err)
		}
	}
	names := func(pl PageLink) []string {
		t.Helper()
		pd, err := te.ListTenantDevices(ctx, a, pl, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range pd.Data {
			out = append(out, d.Name)
		}
		return out
	}
	if got := names(PageLink{PageSize: 10, TextSearch: "BOILER", SortProperty: "name"}); !slices.Equal(got, []string{"boiler q", "q1"}) {
		t.Errorf("search by name or label: %v", got)
	}
	if got := names(PageLink{PageSize: 10, TextSearch: "q", SortProperty: "customerTitle"}); !slices.Equal(got, []string{"boiler q", "q1", "q2"}) {
		t.Errorf("by customer title: %v", got)
	}
	if got := names(PageLink{PageSize: 10, TextSearch: "q", SortProperty: "customerTitle", SortOrder: "DESC"}); !slices.Equal(got, []string{"q2", "q1", "boiler q"}) {
		t.Errorf("by customer title, descending: %v", got)
	}
}

// TestAccessTokenChecks: control characters are refused with ThingsBoard's
// message, "." and ".." (paths a proxy would clean) too; an unknown device is
// 404 as ThingsBoard's checkDeviceId.
func TestAccessTokenChecks(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	d, err := te.SaveDevice(ctx, a, &Device{Name: "checked"}, "")
	if err != nil {
		t.Fatal(err)
	}
	save := func(token string) error {
		_, err := te.SaveDeviceCredentials(ctx, a, &DeviceCredentials{DeviceID: d.ID, CredentialsType: CredentialsAccessToken, CredentialsID: token})
		return err
	}
	for _, c := range []struct{ token, msg string }{
		{"a\x00b", "credentialsId must not contain control characters!"},
		{"tab\there", "credentialsId must not contain control characters!"},
		{"line\n", "credentialsId must not contain control characters!"},
		{"del\x7f", "credentialsId must not contain control characters!"},
		{".", "Access token must not be '.' or '..'"},
		{"..", "Access token must not be '.' or '..'"},
		{"a b", errBadAccessToken.Msg},
	} {
		err := save(c.token)
		wantCode(t, err, CodeBadRequestParams)
		if err.Error() != c.msg {
			t.Errorf("%q: %q, want %q", c.token, err, c.msg)
		}
		_, err = te.SaveDevice(ctx, a, &Device{Name: "new " + c.token}, c.token)
		wantCode(t, err, CodeBadRequestParams)
	}
	for _, ok := range []string{"...", ".a", "a.", "ünïcode"} {
		if err := save(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	unknown := newEntityID(EntityDevice, uuid.New())
	_, err = te.SaveDeviceCredentials(ctx, a, &DeviceCredentials{DeviceID: unknown, CredentialsType: CredentialsAccessToken, CredentialsID: "x"})
	wantCode(t, err, CodeItemNotFound)
	if want := "Device with id [" + unknown.ID.String() + "] is not found"; err.Error() != want {
		t.Errorf("unknown device: %q, want %q", err, want)
	}
}

// An update keeps the stored id: a client's entityType in "id" is not written.
func TestSaveKeepsStoredID(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	d, err := te.SaveDevice(ctx, a, &Device{Name: "typed"}, "")
	if err != nil {
		t.Fatal(err)
	}
	d.ID.EntityType = EntityTenant
	if d, err = te.SaveDevice(ctx, a, d, ""); err != nil || d.ID.EntityType != EntityDevice {
		t.Fatalf("device: %+v %v", d, err)
	}
	c, err := te.SaveCustomer(ctx, a, &Customer{Title: "typed"})
	if err != nil {
		t.Fatal(err)
	}
	c.ID.EntityType = ""
	if c, err = te.SaveCustomer(ctx, a, c); err != nil || c.ID.EntityType != EntityCustomer {
		t.Fatalf("customer: %+v %v", c, err)
	}
	sys := te.sysadmin(t)
	tn, err := te.GetTenant(ctx, sys, a.TenantID)
	if err != nil {
		t.Fatal(err)
	}
	tn.ID.EntityType = EntityDevice
	if tn, err = te.SaveTenant(ctx, sys, tn); err != nil || tn.ID.EntityType != EntityTenant {
		t.Fatalf("tenant: %+v %v", tn, err)
	}
}

// TestAssignRacingCustomerDelete: an assignment (or claim) racing the
// deletion of its customer never leaves the device assigned to a customer
// that is gone.
func TestAssignRacingCustomerDelete(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	d, err := te.SaveDevice(ctx, a, &Device{Name: "contested"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for round := range 40 {
		c, err := te.SaveCustomer(ctx, a, &Customer{Title: fmt.Sprintf("doomed-%d", round)})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { te.AssignDevice(ctx, a, c.ID.ID, d.ID.ID) })
		wg.Go(func() {
			if err := te.DeleteCustomer(ctx, a, c.ID.ID); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		got, err := te.GetDevice(ctx, a, d.ID.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.CustomerID.ID == c.ID.ID {
			t.Fatalf("round %d: the device stays assigned to the deleted customer", round)
		}
	}
}

// TestAdditionalInfoBound: a device's, customer's or tenant's additionalInfo
// is at most 64 KiB, as a user's.
func TestAdditionalInfoBound(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	big := json.RawMessage(`{"x":"` + strings.Repeat("a", maxAdditionalInfo) + `"}`)
	_, err := te.SaveDevice(ctx, a, &Device{Name: "big", AdditionalInfo: big}, "")
	wantCode(t, err, CodeBadRequestParams)
	_, err = te.SaveCustomer(ctx, a, &Customer{Title: "big", AdditionalInfo: big})
	wantCode(t, err, CodeBadRequestParams)
	_, err = te.SaveTenant(ctx, te.sysadmin(t), &Tenant{Title: "big", AdditionalInfo: big})
	wantCode(t, err, CodeBadRequestParams)
	_, err = te.SaveDevice(ctx, a, &Device{Name: "big data", DeviceData: big}, "")
	wantCode(t, err, CodeBadRequestParams)
	if _, err := te.SaveDevice(ctx, a, &Device{Name: "fits", AdditionalInfo: json.RawMessage(`{"description":"ok"}`)}, ""); err != nil {
		t.Fatal(err)
	}
}
