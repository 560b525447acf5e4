package engine

import (
	"context"
	"testing"
)

// TestProfileRenameAndTransport: renaming a profile renames its devices' type
// and its views' source;
// its type or transport type cannot change while devices use it; a blank
// device type creates no profile (ThingsBoard's DeviceProfileServiceImpl and
// DeviceProfileDataValidator).
func TestProfileRenameAndTransport(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	a := te.tenantAdmin(t)
	dp, err := te.SaveDeviceProfile(ctx, a, &DeviceProfile{Name: "meter"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := te.SaveDevice(ctx, a, &Device{Name: "m1", DeviceProfileID: dp.ID}, "")
	if err != nil || d.Type != "meter" {
		t.Fatalf("device: %+v %v", d, err)
	}
	view, err := te.SaveView(ctx, a, &View{Name: "meters", Source: ViewSource{DeviceProfile: "meter"},
		Fields: []ViewField{{Label: "Device", Source: SourceEntityName}}})
	if err != nil {
		t.Fatal(err)
	}
	ren := *dp
	ren.Name, ren.Version = "smart meter", 0
	if dp, err = te.SaveDeviceProfile(ctx, a, &ren); err != nil {
		t.Fatal(err)
	}
	// A view of the profile follows its new name.
	if v, err := te.GetView(ctx, a, view.ID.ID); err != nil || v.Source.DeviceProfile != "smart meter" {
		t.Fatalf("view after the rename: %+v %v", v, err)
	}
	got, err := te.GetDevice(ctx, a, d.ID.ID)
	if err != nil || got.Type != "smart meter" || got.Version != d.Version+1 {
		t.Fatalf("device after the rename: %+v %v", got, err)
	}
	page, err := te.ListTenantDevices(ctx, a, PageLink{PageSize: 10}, "smart meter")
	if err != nil || page.TotalElements != 1 {
		t.Fatalf("devices of the new type: %+v %v", page, err)
	}
	// A device update that names no profile keeps it under its new name.
	got.Label = "kept"
	if got, err = te.SaveDevice(ctx, a, got, ""); err != nil || got.DeviceProfileID != dp.ID {
		t.Fatalf("update after the rename: %+v %v", got, err)
	}

	mqtt := *dp
	mqtt.TransportType, mqtt.Version = "MQTT", 0
	_, err = te.SaveDeviceProfile(ctx, a, &mqtt)
	wantCode(t, err, CodeBadRequestParams)
	if err.Error() != "Can't change device profile transport type because devices referenced it!" {
		t.Fatalf("message %q", err)
	}
	wantCode(t, te.DeleteDevice(ctx, a, d.ID.ID), 0)
	if got, err := te.SaveDeviceProfile(ctx, a, &mqtt); err != nil || got.TransportType != "MQTT" {
		t.Fatalf("transport change of an unused profile: %+v %v", got, err)
	}

	for _, typ := range []string{" ", "   "} {
		_, err := te.SaveDevice(ctx, a, &Device{Name: "blank type", Type: typ}, "")
		wantCode(t, err, CodeBadRequestParams)
		if err.Error() != "Device profile name should be specified!" {
			t.Fatalf("%q: message %q", typ, err)
		}
	}
	all, err := listRecords[DeviceProfile](ctx, te.Engine, kindProfile, a.TenantID)
	if err != nil || len(all) != 2 {
		t.Fatalf("%d profiles, want 2: %v", len(all), err)
	}
}
