package engine

import (
	"context"
	"testing"
)

// TestSetDefaultDeviceProfile: the default moves; devices saved without a
// profile get the new one; the old one may be deleted; a second default is
// 400 as ThingsBoard.
func TestSetDefaultDeviceProfile(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	old, err := te.GetDefaultProfileInfo(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "next"})
	if err != nil || dp.Default {
		t.Fatalf("new profile: %+v %v", dp, err)
	}
	got, err := te.SetDefaultDeviceProfile(ctx, admin, dp.ID.ID)
	if err != nil || !got.Default || got.Version != dp.Version+1 {
		t.Fatalf("set default: %+v %v", got, err)
	}
	if info, err := te.GetDefaultProfileInfo(ctx, admin); err != nil || info.ID != dp.ID {
		t.Fatalf("default after the change: %+v %v", info, err)
	}
	if prev, err := te.GetDeviceProfile(ctx, admin, old.ID.ID); err != nil || prev.Default {
		t.Fatalf("old default: %+v %v", prev, err)
	}
	d, err := te.SaveDevice(ctx, admin, &Device{Name: "follows"}, "")
	if err != nil || d.DeviceProfileID != dp.ID {
		t.Fatalf("device saved without a profile: %+v %v", d, err)
	}
	// Again: nothing changes.
	if again, err := te.SetDefaultDeviceProfile(ctx, admin, dp.ID.ID); err != nil || again.Version != got.Version {
		t.Fatalf("set default twice: %+v %v", again, err)
	}
	wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp.ID.ID), CodeBadRequestParams)

	// default:true while another is the default.
	_, err = te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "second", Default: true})
	wantCode(t, err, CodeBadRequestParams)
	if err.Error() != "Another default device profile is present in scope of current tenant!" {
		t.Fatalf("message %q", err)
	}
	prev, err := te.GetDeviceProfile(ctx, admin, old.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	prev.Default = true
	_, err = te.SaveDeviceProfile(ctx, admin, prev)
	wantCode(t, err, CodeBadRequestParams)
	// default:false on the default keeps it the default.
	got.Default = false
	if kept, err := te.SaveDeviceProfile(ctx, admin, got); err != nil || !kept.Default {
		t.Fatalf("default saved with default:false: %+v %v", kept, err)
	}

	other := te.newTenant(t, "B", "b@example.com")
	_, err = te.SetDefaultDeviceProfile(ctx, other, dp.ID.ID)
	wantCode(t, err, CodePermissionDenied)
	_, err = te.SetDefaultDeviceProfile(ctx, te.customerUser(t), dp.ID.ID)
	wantCode(t, err, CodePermissionDenied)
}

// TestDefaultChangeHalfWay: a device saved while the default is changing
// (the old one demoted, the new one not yet promoted) gets the new default;
// no third default is created.
func TestDefaultChangeHalfWay(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "next"})
	if err != nil {
		t.Fatal(err)
	}
	// Before the promotion's write, after the mark's and the demotion's.
	n := 0
	te.hook("replace", kindProfile, func() { // the mark
		te.hook("replace", kindProfile, func() { // the demotion
			te.hook("replace", kindProfile, func() { // the promotion
				d, err := te.SaveDevice(ctx, admin, &Device{Name: "between"}, "")
				if err != nil || d.DeviceProfileID != dp.ID {
					t.Errorf("device saved half-way: %+v %v", d, err)
				}
				n++
			})
		})
	})
	got, err := te.SetDefaultDeviceProfile(ctx, admin, dp.ID.ID)
	if err != nil || !got.Default || n != 1 {
		t.Fatalf("set default: %+v %v (hook ran %d)", got, err, n)
	}
	all, err := listRecords[DeviceProfile](ctx, te.Engine, kindProfile, admin.TenantID)
	if err != nil || len(all) != 2 {
		t.Fatalf("%d profiles, want 2: %v", len(all), err)
	}
}

// TestFailedDefaultChange: a change of default that fails while the old
// default stands leaves no mark: the profile stays deletable.
func TestFailedDefaultChange(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	old, err := te.GetDefaultProfileInfo(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "next"})
	if err != nil {
		t.Fatal(err)
	}
	// The demotion keeps being overtaken: the change fails, the default stays.
	var overtake func()
	overtake = func() {
		te.hook("replace", kindProfile, func() {
			cur, prev, err := te.loadProfile(ctx, old.ID.ID)
			if err == nil {
				cur.Description += "."
				te.writeProfile(ctx, cur, &prev)
			}
			overtake()
		})
	}
	te.hook("replace", kindProfile, overtake) // after the mark's write
	_, err = te.SetDefaultDeviceProfile(ctx, admin, dp.ID.ID)
	te.store = te.store.(*hookStore).Backend
	wantCode(t, err, CodeVersionConflict)
	if info, err := te.GetDefaultProfileInfo(ctx, admin); err != nil || info.ID != old.ID {
		t.Fatalf("default after a failed change: %+v %v", info, err)
	}
	wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp.ID.ID), 0)
}
