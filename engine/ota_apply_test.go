package engine

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// attrHookStore runs hook once, just before the first SaveAttributes of
// entity's attributes of scope that it passes on; hook runs on the store
// beneath. It stops a write after its checks and before its attributes.
type attrHookStore struct {
	storage.Backend
	entity uuid.UUID
	scope  storage.Scope
	hook   func()
}

func (s *attrHookStore) SaveAttributes(ctx context.Context, id uuid.UUID, scope storage.Scope, attrs []kv.Entry) error {
	if f := s.hook; f != nil && id == s.entity && scope == s.scope {
		s.hook = nil
		f()
	}
	return s.Backend.SaveAttributes(ctx, id, scope, attrs)
}

// hookAttrs arms an attrHookStore under te: f runs before the next write of
// entity's attributes of scope.
func (te *testEngine) hookAttrs(entity uuid.UUID, scope storage.Scope, f func()) {
	inner := te.store
	hs := &attrHookStore{Backend: inner, entity: entity, scope: scope}
	hs.hook = func() { te.store = inner; f() }
	te.store = hs
}

// hookShared is hookAttrs of the shared attributes, which OTA writes.
func (te *testEngine) hookShared(entity uuid.UUID, f func()) {
	te.hookAttrs(entity, storage.SharedScope, f)
}

// otaRaceFixture is a tenant admin, a profile "followed" with no package, and
// device "follower" on it with none of its own.
type otaRaceFixture struct {
	*testEngine
	admin *Principal
	dp    *DeviceProfile
	dev   *Device
}

func newOtaRaceFixture(t *testing.T) *otaRaceFixture {
	t.Helper()
	ctx := context.Background()
	f := &otaRaceFixture{testEngine: newTestEngine(t)}
	f.admin = f.tenantAdmin(t)
	var err error
	if f.dp, err = f.SaveDeviceProfile(ctx, f.admin, &DeviceProfile{Name: "followed"}); err != nil {
		t.Fatal(err)
	}
	if f.dev, err = f.SaveDevice(ctx, f.admin, &Device{Name: "follower", DeviceProfileID: f.dp.ID}, ""); err != nil {
		t.Fatal(err)
	}
	return f
}

// profileFirmware gives the fixture's profile firmware fw.
func (f *otaRaceFixture) profileFirmware(t *testing.T, fw *OtaPackageInfo) {
	t.Helper()
	dp, err := f.GetDeviceProfile(context.Background(), f.admin, f.dp.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	dp.Version, dp.FirmwareID = 0, &fw.ID
	if _, err := f.SaveDeviceProfile(context.Background(), f.admin, dp); err != nil {
		t.Fatal(err)
	}
}

// saveDevice stores the fixture's device as edit makes it.
func (f *otaRaceFixture) saveDevice(t *testing.T, edit func(*Device)) {
	t.Helper()
	d, err := f.GetDevice(context.Background(), f.admin, f.dev.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	d.Version = 0
	edit(d)
	if _, err := f.SaveDevice(context.Background(), f.admin, d, ""); err != nil {
		t.Fatal(err)
	}
}

// wantFirmware checks the device's fw_* shared attributes name fw (nil: none
// at all) and that the device may download what they name.
func (f *otaRaceFixture) wantFirmware(t *testing.T, fw *OtaPackageInfo) {
	t.Helper()
	ctx := context.Background()
	attrs, err := f.store.GetAttributes(ctx, f.dev.UUID(), storage.SharedScope, otaAttributeKeys(OtaFirmware))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range attrs {
		got[a.Key] = a.Value.Text()
	}
	if fw == nil {
		if len(got) > 0 {
			t.Fatalf("firmware attributes of a device without firmware: %v", got)
		}
		_, err := f.DeviceOtaPackage(ctx, f.dev, OtaFirmware, "", "")
		wantCode(t, err, CodeItemNotFound)
		return
	}
	if got["fw_title"] != fw.Title || got["fw_version"] != fw.Version {
		t.Fatalf("firmware attributes %v, want %s %s", got, fw.Title, fw.Version)
	}
	if _, err := f.DeviceOtaPackage(ctx, f.dev, OtaFirmware, got["fw_title"], got["fw_version"]); err != nil {
		t.Fatalf("download of the firmware the attributes name: %v", err)
	}
}

// TestOtaProfileSaveRacingDeviceOwnPackage: a device given its own package
// while its profile's new package is being written to it keeps its own in
// the attributes, as in its firmwareId.
func TestOtaProfileSaveRacingDeviceOwnPackage(t *testing.T) {
	f := newOtaRaceFixture(t)
	profiles, own := f.otaWithData(t, f.admin, "profile's"), f.otaWithData(t, f.admin, "own")
	f.hookShared(f.dev.UUID(), func() { f.saveDevice(t, func(d *Device) { d.FirmwareID = &own.ID }) })
	f.profileFirmware(t, profiles)
	f.wantFirmware(t, own)
}

// TestOtaProfileSaveRacingDeviceMove: a device moved to a profile without
// firmware while its old profile's new package is being written to it ends
// with no firmware.
func TestOtaProfileSaveRacingDeviceMove(t *testing.T) {
	f := newOtaRaceFixture(t)
	ctx := context.Background()
	bare, err := f.SaveDeviceProfile(ctx, f.admin, &DeviceProfile{Name: "bare"})
	if err != nil {
		t.Fatal(err)
	}
	fw := f.otaWithData(t, f.admin, "left behind")
	f.hookShared(f.dev.UUID(), func() { f.saveDevice(t, func(d *Device) { d.DeviceProfileID, d.Type = bare.ID, "" }) })
	f.profileFirmware(t, fw)
	f.wantFirmware(t, nil)
}

// TestOtaProfileSavesRacing: of two saves of a profile's package, the
// devices end with the one stored last.
func TestOtaProfileSavesRacing(t *testing.T) {
	f := newOtaRaceFixture(t)
	first, second := f.otaWithData(t, f.admin, "first"), f.otaWithData(t, f.admin, "second")
	f.hookShared(f.dev.UUID(), func() { f.profileFirmware(t, second) })
	f.profileFirmware(t, first)
	f.wantFirmware(t, second)
}

// TestOtaDeviceSavesRacing: the same for two saves of a device, the first
// giving it back to its profile's package, the second its own.
func TestOtaDeviceSavesRacing(t *testing.T) {
	f := newOtaRaceFixture(t)
	profiles, old, own := f.otaWithData(t, f.admin, "profile's"), f.otaWithData(t, f.admin, "old"), f.otaWithData(t, f.admin, "own")
	f.profileFirmware(t, profiles)
	f.saveDevice(t, func(d *Device) { d.FirmwareID = &old.ID })
	f.wantFirmware(t, old)
	f.hookShared(f.dev.UUID(), func() { f.saveDevice(t, func(d *Device) { d.FirmwareID = &own.ID }) })
	f.saveDevice(t, func(d *Device) { d.FirmwareID = nil })
	f.wantFirmware(t, own)
}

// TestOtaApplySkipsChangedDevice: a package applied to a device whose
// package is another by then, or which is gone, writes nothing.
func TestOtaApplySkipsChangedDevice(t *testing.T) {
	f := newOtaRaceFixture(t)
	ctx := context.Background()
	stale := f.otaWithData(t, f.admin, "stale")
	if err := f.applyOta(ctx, f.dev, OtaFirmware, stale.ID.ID); err != nil {
		t.Fatal(err)
	}
	f.wantFirmware(t, nil)

	wantCode(t, f.DeleteDevice(ctx, f.admin, f.dev.ID.ID), 0)
	if err := f.applyOta(ctx, f.dev, OtaFirmware, stale.ID.ID); err != nil {
		t.Fatalf("apply to a deleted device: %v", err)
	}
	if attrs, err := f.store.GetAttributes(ctx, f.dev.UUID(), storage.SharedScope, nil); err != nil || len(attrs) > 0 {
		t.Fatalf("attributes written for a deleted device: %v %v", attrs, err)
	}
}
