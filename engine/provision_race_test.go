package engine

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/sluice-iot/sluice/storage"
)

// preFixture is a CHECK_PRE_PROVISIONED_DEVICES profile "pre" with a device
// "pre-1" on it, token "pre-token-1".
type preFixture struct {
	*testEngine
	admin *Principal
	dev   *Device
}

func newPreFixture(t *testing.T) *preFixture {
	t.Helper()
	f := &preFixture{testEngine: newTestEngine(t)}
	f.admin = f.tenantAdmin(t)
	pre := f.provisionProfile(t, f.admin, "pre", ProvisionCheckPre, "pre-key", "pre-secret")
	var err error
	f.dev, err = f.SaveDevice(context.Background(), f.admin, &Device{Name: "pre-1", DeviceProfileID: pre.ID}, "pre-token-1")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// provisionDev provisions the fixture's device and checks the answer's status.
func (f *preFixture) provisionDev(t *testing.T, want string) {
	t.Helper()
	name := f.dev.Name
	res := f.provision(t, ProvisionRequest{DeviceName: &name, ProvisionDeviceKey: "pre-key", ProvisionDeviceSecret: "pre-secret"})
	if res.Status != want {
		t.Fatalf("provisioning: %+v, want %s", res, want)
	}
}

// wantNoGuard checks no provisioning guard of the device is left.
func (f *preFixture) wantNoGuard(t *testing.T) {
	t.Helper()
	if _, err := f.store.Lookup(context.Background(), kindProvision, provisionGuardKey(f.dev.UUID())); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("provisioning guard left: %v", err)
	}
}

// putGuard stores a guard of the device created at ms, as a node stopped
// inside a provisioning leaves it.
func (f *preFixture) putGuard(t *testing.T, ms int64) {
	t.Helper()
	g := provisionGuard{ID: newID(), DeviceID: f.dev.UUID(), Created: ms}
	if err := f.putRecord(context.Background(), kindProvision, g.ID, f.dev.TenantID(), &g, provisionGuardKey(f.dev.UUID())); err != nil {
		t.Fatal(err)
	}
}

// TestProvisionPreProvisionedConcurrent: of concurrent provisionings of one
// device exactly one is SUCCESS, the others FAILURE as a second one is.
func TestProvisionPreProvisionedConcurrent(t *testing.T) {
	f := newPreFixture(t)
	const n = 8
	results := make([]*ProvisionResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			name := f.dev.Name
			results[i], errs[i] = f.ProvisionDevice(context.Background(),
				&ProvisionRequest{DeviceName: &name, ProvisionDeviceKey: "pre-key", ProvisionDeviceSecret: "pre-secret"})
		})
	}
	wg.Wait()
	success := 0
	for i, res := range results {
		switch {
		case errs[i] != nil:
			t.Fatal(errs[i])
		case res.Status == ProvisionSuccess && res.Token == "pre-token-1":
			success++
		case res.Status != ProvisionFailure || res.ErrorMsg != provisionFailureMsg:
			t.Fatalf("answer %+v", res)
		}
	}
	if success != 1 {
		t.Fatalf("%d of %d concurrent provisionings succeeded, want 1", success, n)
	}
	f.wantNoGuard(t)
}

// TestProvisionPreProvisionedOvertaken: a provisioning that runs between
// another's check of provisionState and its write is FAILURE.
func TestProvisionPreProvisionedOvertaken(t *testing.T) {
	f := newPreFixture(t)
	f.hookAttrs(f.dev.UUID(), storage.ServerScope, func() { f.provisionDev(t, ProvisionFailure) })
	f.provisionDev(t, ProvisionSuccess)
	f.wantNoGuard(t)
}

// TestProvisionGuardKeepsReprovisioning: the guard changes none of the rules
// of a second provisioning: refused while provisionState is set, allowed once
// it is deleted.
func TestProvisionGuardKeepsReprovisioning(t *testing.T) {
	f := newPreFixture(t)
	ctx := context.Background()
	f.provisionDev(t, ProvisionSuccess)
	f.provisionDev(t, ProvisionFailure)
	if err := f.DeleteAttributes(ctx, f.dev.UUID(), storage.ServerScope, []string{provisionStateKey}); err != nil {
		t.Fatal(err)
	}
	f.provisionDev(t, ProvisionSuccess)
	f.wantNoGuard(t)
}

// TestProvisionGuardLeftBehind: a guard a stopped node left refuses the
// device until it is stale, then is taken over; device deletion drops one.
func TestProvisionGuardLeftBehind(t *testing.T) {
	f := newPreFixture(t)
	ctx := context.Background()
	now := f.now().UnixMilli()
	f.putGuard(t, now)
	f.provisionDev(t, ProvisionFailure)
	if err := f.dropProvisionGuard(ctx, f.dev.UUID()); err != nil {
		t.Fatal(err)
	}

	f.putGuard(t, now-provisionGuardTTL.Milliseconds()-1)
	f.provisionDev(t, ProvisionSuccess)
	f.wantNoGuard(t)

	f.putGuard(t, now)
	wantCode(t, f.DeleteDevice(ctx, f.admin, f.dev.ID.ID), 0)
	f.wantNoGuard(t)
}
