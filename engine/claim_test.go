package engine

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// claimFixture is a test engine with a frozen clock, a tenant admin, the demo
// customer user, a user of a second customer and one unassigned device.
type claimFixture struct {
	*testEngine
	clock             time.Time
	admin, cust, othr *Principal
	dev               *Device
}

func newClaimFixture(t *testing.T) *claimFixture {
	t.Helper()
	ctx := context.Background()
	f := &claimFixture{testEngine: newTestEngine(t), clock: time.UnixMilli(1_700_000_000_000)}
	f.now = func() time.Time { return f.clock }
	f.admin, f.cust = f.tenantAdmin(t), f.customerUser(t)
	other, err := f.SaveCustomer(ctx, f.admin, &Customer{Title: "Customer B"})
	if err != nil {
		t.Fatal(err)
	}
	f.othr = &Principal{UserID: newID(), TenantID: f.admin.TenantID, CustomerID: other.ID.ID, Authority: CustomerUser}
	if f.dev, err = f.SaveDevice(ctx, f.admin, &Device{Name: "claimable"}, ""); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *claimFixture) advance(d time.Duration) { f.clock = f.clock.Add(d) }

// claim claims the fixture's device as p and checks the outcome.
func (f *claimFixture) claim(t *testing.T, p *Principal, secret, want string) *ClaimResult {
	t.Helper()
	res, err := f.ClaimDevice(context.Background(), p, f.dev.Name, secret)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if res.Response != want {
		t.Fatalf("claim with %q: %s, want %s", secret, res.Response, want)
	}
	if (res.Device != nil) != (want == ClaimSuccess) {
		t.Fatalf("claim %s with device %v", res.Response, res.Device)
	}
	return res
}

func (f *claimFixture) register(t *testing.T, secret string, durationMs int64, code Code) {
	t.Helper()
	wantCode(t, f.RegisterClaim(context.Background(), f.dev, secret, durationMs), code)
}

// customerOf reads the device's customer from storage.
func (f *claimFixture) customerOf(t *testing.T) string {
	t.Helper()
	d, err := f.loadDevice(context.Background(), f.dev.UUID())
	if err != nil {
		t.Fatal(err)
	}
	if isNull(d.CustomerID.ID) {
		return "none"
	}
	return d.CustomerID.ID.String()
}

func (f *claimFixture) saveServer(t *testing.T, key string, v kv.Value) {
	t.Helper()
	if err := f.SaveAttributes(context.Background(), f.dev.UUID(), storage.ServerScope, []kv.Entry{{Key: key, Value: v}}); err != nil {
		t.Fatal(err)
	}
}

// serverAttrs lists the stored server attributes (without the derived "active").
func (f *claimFixture) serverAttrs(t *testing.T) string {
	t.Helper()
	attrs, err := f.store.GetAttributes(context.Background(), f.dev.UUID(), storage.ServerScope, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := ""
	for _, a := range attrs {
		s += a.Key + "=" + a.Value.Text() + ";"
	}
	return s
}

func TestClaimDeviceSide(t *testing.T) {
	f := newClaimFixture(t)
	f.claim(t, f.cust, "", ClaimFailure) // nothing registered

	f.register(t, "s3cret", 60_000, 0)
	f.claim(t, f.cust, "wrong", ClaimFailure)
	// A failed attempt ends the window, as in ThingsBoard: no guessing.
	f.claim(t, f.cust, "s3cret", ClaimFailure)

	f.register(t, "s3cret", 60_000, 0)
	res := f.claim(t, f.cust, "s3cret", ClaimSuccess)
	if res.Device.CustomerID.ID != f.cust.CustomerID || f.customerOf(t) != f.cust.CustomerID.String() {
		t.Fatalf("claimed device belongs to %v / %s", res.Device.CustomerID, f.customerOf(t))
	}
	if _, err := f.GetDevice(context.Background(), f.cust, f.dev.UUID()); err != nil {
		t.Fatalf("the customer user cannot see its claimed device: %v", err)
	}
	f.claim(t, f.cust, "s3cret", ClaimClaimed)
	f.claim(t, f.othr, "s3cret", ClaimClaimed)
	f.register(t, "again", 0, CodeBadRequestParams) // already claimed
}

func TestClaimEmptySecrets(t *testing.T) {
	f := newClaimFixture(t)
	f.register(t, "", 0, 0)
	f.claim(t, f.othr, "", ClaimSuccess)

	f2 := newClaimFixture(t)
	f2.register(t, "", 0, 0)
	f2.claim(t, f2.cust, "x", ClaimFailure)
	f2.register(t, "x", 0, 0)
	f2.claim(t, f2.cust, "", ClaimFailure)
}

func TestClaimPutIfAbsentAndExpiry(t *testing.T) {
	f := newClaimFixture(t)
	f.register(t, "first", 1000, 0)
	f.register(t, "second", 5000, 0)   // a window is open: kept as it is
	f.advance(1000 * time.Millisecond) // the last valid millisecond
	f.register(t, "third", 0, 0)
	f.claim(t, f.cust, "first", ClaimSuccess)

	g := newClaimFixture(t)
	g.register(t, "first", 1000, 0)
	g.advance(1001 * time.Millisecond)
	g.claim(t, g.cust, "first", ClaimFailure) // expired

	h := newClaimFixture(t)
	h.register(t, "first", 1000, 0)
	h.advance(1001 * time.Millisecond)
	h.register(t, "second", 0, 0) // replaces the expired window, default duration 24 h
	h.advance(24*time.Hour - time.Millisecond)
	h.claim(t, h.cust, "second", ClaimSuccess)
}

func TestClaimDefaultDurationAndOverflow(t *testing.T) {
	f := newClaimFixture(t)
	f.register(t, "k", 1<<62, 0) // saturates instead of wrapping into the past
	f.advance(1000 * 24 * time.Hour)
	f.claim(t, f.cust, "k", ClaimSuccess)

	g := newClaimFixture(t)
	g.register(t, "k", -1, 0) // ≤ 0: the configured 24 h
	g.advance(24*time.Hour + time.Millisecond)
	g.claim(t, g.cust, "k", ClaimFailure)
}

func TestClaimServerSide(t *testing.T) {
	f := newClaimFixture(t)
	exp := strconv.FormatInt(f.clock.UnixMilli()+1000, 10)
	f.saveServer(t, claimingDataKey, kv.JSONValue(`{"secretKey":"srv","expirationTime":`+exp+`}`))
	f.saveServer(t, claimingAllowedKey, kv.BoolValue(true))
	f.saveServer(t, "other", kv.LongValue(1))
	f.claim(t, f.cust, "wrong", ClaimFailure)
	f.advance(1001 * time.Millisecond)
	f.claim(t, f.cust, "srv", ClaimFailure) // expired
	f.advance(-1001 * time.Millisecond)
	f.claim(t, f.cust, "srv", ClaimSuccess) // a failure does not remove server-side data
	if got := f.serverAttrs(t); got != "other=1;" {
		t.Fatalf("server attributes after claim: %s", got)
	}

	// A device-side window wins over claimingData; claimingData as a string works too.
	g := newClaimFixture(t)
	g.saveServer(t, claimingDataKey, kv.StringValue(`{"secretKey":"srv","expirationTime":`+exp+`}`))
	g.register(t, "dev", 0, 0)
	g.claim(t, g.cust, "srv", ClaimFailure) // ends the device-side window
	g.claim(t, g.cust, "srv", ClaimSuccess)

	h := newClaimFixture(t)
	h.saveServer(t, claimingDataKey, kv.StringValue(`not json`))
	h.claim(t, h.cust, "", ClaimFailure)
}

func TestClaimNotByDefault(t *testing.T) {
	f := newClaimFixture(t)
	f.cfg.ClaimNotByDefault = true
	ctx := context.Background()
	f.register(t, "k", 0, CodeBadRequestParams)
	f.saveServer(t, claimingAllowedKey, kv.StringValue("true"))
	f.register(t, "k", 0, CodeBadRequestParams) // only the boolean true allows
	f.saveServer(t, claimingAllowedKey, kv.BoolValue(true))
	f.register(t, "k", 0, 0)
	f.claim(t, f.cust, "k", ClaimSuccess)
	if got := f.serverAttrs(t); got != "" {
		t.Fatalf("server attributes after claim: %s", got)
	}

	// Reclaiming gives the device back and allows claiming it again.
	wantCode(t, f.ReclaimDevice(ctx, f.othr, f.dev.Name), CodePermissionDenied)
	wantCode(t, f.ReclaimDevice(ctx, f.cust, f.dev.Name), 0)
	if f.customerOf(t) != "none" || f.serverAttrs(t) != "claimingAllowed=true;" {
		t.Fatalf("after reclaim: customer %s, attributes %s", f.customerOf(t), f.serverAttrs(t))
	}
	f.register(t, "k2", 0, 0)
	f.claim(t, f.othr, "k2", ClaimSuccess)
}

func TestReclaimDevice(t *testing.T) {
	f := newClaimFixture(t)
	ctx := context.Background()
	wantCode(t, f.ReclaimDevice(ctx, f.admin, "no such device"), CodeItemNotFound)
	wantCode(t, f.ReclaimDevice(ctx, f.sysadmin(t), f.dev.Name), CodePermissionDenied)
	wantCode(t, f.ReclaimDevice(ctx, f.cust, f.dev.Name), CodePermissionDenied) // not its device

	// On an unassigned device reclaiming only ends an open window.
	f.register(t, "k", 0, 0)
	wantCode(t, f.ReclaimDevice(ctx, f.admin, f.dev.Name), 0)
	f.claim(t, f.cust, "k", ClaimFailure)

	f.register(t, "k", 0, 0)
	f.claim(t, f.cust, "k", ClaimSuccess)
	wantCode(t, f.ReclaimDevice(ctx, f.admin, f.dev.Name), 0)
	if f.customerOf(t) != "none" || f.serverAttrs(t) != "" {
		t.Fatalf("after reclaim: customer %s, attributes %s", f.customerOf(t), f.serverAttrs(t))
	}
	if _, err := f.GetDevice(ctx, f.cust, f.dev.UUID()); err == nil {
		t.Fatal("the customer user still sees a reclaimed device")
	}
}

func TestClaimAccess(t *testing.T) {
	f := newClaimFixture(t)
	ctx := context.Background()
	for _, p := range []*Principal{f.admin, f.sysadmin(t), nil} {
		if _, err := f.ClaimDevice(ctx, p, f.dev.Name, ""); err == nil {
			t.Fatalf("%v may claim", p)
		}
	}
	_, err := f.ClaimDevice(ctx, f.cust, "no such device", "")
	wantCode(t, err, CodeItemNotFound)

	// Another tenant's device of the same name is not found.
	other := f.newTenant(t, "T2", "t2@example.com")
	if _, err := f.SaveDevice(ctx, other, &Device{Name: "only-in-t2"}, ""); err != nil {
		t.Fatal(err)
	}
	_, err = f.ClaimDevice(ctx, f.cust, "only-in-t2", "")
	wantCode(t, err, CodeItemNotFound)
	wantCode(t, f.ReclaimDevice(ctx, f.admin, "only-in-t2"), CodeItemNotFound)

	// The demo customer's device is claimed already.
	if res, err := f.ClaimDevice(ctx, f.othr, DemoCustomerDeviceName, ""); err != nil || res.Response != ClaimClaimed {
		t.Fatalf("claim of the demo customer device: %v %v", res, err)
	}
	dev, err := f.DeviceByToken(ctx, DemoCustomerDeviceToken)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, f.RegisterClaim(ctx, dev, "", 0), CodeBadRequestParams)
}

func TestDeleteDeviceDropsClaim(t *testing.T) {
	f := newClaimFixture(t)
	ctx := context.Background()
	f.register(t, "k", 0, 0)
	wantCode(t, f.DeleteDevice(ctx, f.admin, f.dev.UUID()), 0)
	if _, err := f.store.Lookup(ctx, kindClaim, claimDeviceKey(f.dev.UUID())); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("claim of a deleted device: %v", err)
	}
}

// TestClaimRace: two customers claiming one device through its claimingData
// (a window nothing uses up) at once: the claim that writes second sees the
// device assigned and answers CLAIMED, and the first customer keeps it. Same for
// a claim overtaken by an admin's assignment.
func TestClaimRace(t *testing.T) {
	f := newClaimFixture(t)
	ctx := context.Background()
	exp := strconv.FormatInt(f.clock.UnixMilli()+60_000, 10)
	f.saveServer(t, claimingDataKey, kv.JSONValue(`{"secretKey":"srv","expirationTime":`+exp+`}`))
	overtake := f.overtaker()
	overtake(func() { f.claim(t, f.othr, "srv", ClaimSuccess) })
	f.claim(t, f.cust, "srv", ClaimClaimed)
	if got := f.customerOf(t); got != f.othr.CustomerID.String() {
		t.Fatalf("device of %s, want the first claimer's %s", got, f.othr.CustomerID)
	}

	g := newClaimFixture(t)
	g.register(t, "dev", 0, 0)
	overtake = g.overtaker()
	overtake(func() {
		if _, err := g.AssignDevice(ctx, g.admin, g.othr.CustomerID, g.dev.UUID()); err != nil {
			t.Error(err)
		}
	})
	g.claim(t, g.cust, "dev", ClaimClaimed)
	if got := g.customerOf(t); got != g.othr.CustomerID.String() {
		t.Fatalf("device of %s, want the admin's choice %s", got, g.othr.CustomerID)
	}
}

// TestClaimingDataAsJackson: claimingData is read as ThingsBoard's Jackson
// reads ClaimData: expirationTime a number or a string holding one, secretKey
// any scalar as its text.
func TestClaimingDataAsJackson(t *testing.T) {
	exp := strconv.FormatInt(1_700_000_000_000+1000, 10) // a second after the fixtures' clock
	for _, c := range []struct{ data, secret, want string }{
		{`{"secretKey":"x","expirationTime":"` + exp + `"}`, "x", ClaimSuccess},
		{`{"secretKey":"x","expirationTime":" ` + exp + ` "}`, "x", ClaimSuccess},
		{`{"secretKey":"x","expirationTime":` + exp + `.9}`, "x", ClaimSuccess},
		{`{"secretKey":123,"expirationTime":` + exp + `}`, "123", ClaimSuccess},
		{`{"secretKey":1.50,"expirationTime":` + exp + `}`, "1.50", ClaimSuccess},
		{`{"secretKey":true,"expirationTime":` + exp + `}`, "true", ClaimSuccess},
		{`{"secretKey":null,"expirationTime":` + exp + `}`, "", ClaimSuccess},
		{`{"expirationTime":` + exp + `}`, "", ClaimSuccess},
		{`{"secretKey":123,"expirationTime":` + exp + `}`, "124", ClaimFailure},
		{`{"secretKey":"x"}`, "x", ClaimFailure},                       // expirationTime 0: expired
		{`{"secretKey":"x","expirationTime":null}`, "x", ClaimFailure}, // likewise
		{`{"secretKey":"x","expirationTime":"null"}`, "x", ClaimFailure},
		{`{"secretKey":"x","expirationTime":"soon"}`, "x", ClaimFailure}, // no window
		{`{"secretKey":"x","expirationTime":true}`, "x", ClaimFailure},
		{`{"secretKey":"x","expirationTime":1e300}`, "x", ClaimFailure},
		{`{"secretKey":{"a":1},"expirationTime":` + exp + `}`, "", ClaimFailure},
		{`{"secretKey":["x"],"expirationTime":` + exp + `}`, "x", ClaimFailure},
	} {
		f := newClaimFixture(t)
		f.saveServer(t, claimingDataKey, kv.StringValue(c.data))
		res, err := f.ClaimDevice(context.Background(), f.cust, f.dev.Name, c.secret)
		if err != nil || res.Response != c.want {
			t.Fatalf("claimingData %s with %q: %+v %v, want %s", c.data, c.secret, res, err, c.want)
		}
	}
}

// TestClaimOfClaimedDevice: ThingsBoard checks the window before the owner:
// on a device a customer has, a wrong key with a window open is FAILURE and
// ends a device-side window, the right key is CLAIMED and removes the
// claiming data, and no window is CLAIMED.
func TestClaimOfClaimedDevice(t *testing.T) {
	f := newClaimFixture(t)
	ctx := context.Background()
	f.register(t, "k", 0, 0)
	if _, err := f.AssignDevice(ctx, f.admin, f.othr.CustomerID, f.dev.UUID()); err != nil {
		t.Fatal(err)
	}
	f.claim(t, f.cust, "wrong", ClaimFailure)
	if _, err := f.store.Lookup(ctx, kindClaim, claimDeviceKey(f.dev.UUID())); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("window after a wrong key: %v", err)
	}
	f.claim(t, f.cust, "k", ClaimClaimed) // no window left

	exp := strconv.FormatInt(f.clock.UnixMilli()+1000, 10)
	f.saveServer(t, claimingDataKey, kv.JSONValue(`{"secretKey":"srv","expirationTime":`+exp+`}`))
	f.saveServer(t, claimingAllowedKey, kv.BoolValue(true))
	f.claim(t, f.cust, "wrong", ClaimFailure)
	f.advance(1001 * time.Millisecond)
	f.claim(t, f.cust, "srv", ClaimFailure) // expired
	f.advance(-1001 * time.Millisecond)
	if got := f.serverAttrs(t); got != "claimingAllowed=true;claimingData="+`{"secretKey":"srv","expirationTime":`+exp+`};` {
		t.Fatalf("server attributes after failed claims: %s", got)
	}
	f.claim(t, f.cust, "srv", ClaimClaimed)
	if got := f.serverAttrs(t); got != "" {
		t.Fatalf("server attributes after the right key: %s", got)
	}
	if got := f.customerOf(t); got != f.othr.CustomerID.String() {
		t.Fatalf("device of %s, want %s", got, f.othr.CustomerID)
	}
}
