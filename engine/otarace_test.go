package engine

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// otaWithData creates a firmware package of p's tenant, of no profile, with
// bytes: one that may be assigned to any device or profile.
func (te *testEngine) otaWithData(t *testing.T, p *Principal, title string) *OtaPackageInfo {
	t.Helper()
	ctx := context.Background()
	info, err := te.SaveOtaPackageInfo(ctx, p, &SaveOtaPackageInfoRequest{OtaPackageInfo: OtaPackageInfo{
		Type: OtaFirmware, Title: title, Version: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	info, err = te.SaveOtaPackageData(ctx, p, info.ID.ID, OtaUpload{
		ChecksumAlgorithm: "SHA256", FileName: "fw.bin", Data: bytes.NewReader([]byte("firmware"))})
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// danglingOta lists the devices and profiles of p's tenant that name a
// package that is gone.
func (te *testEngine) danglingOta(t *testing.T, p *Principal) []string {
	t.Helper()
	ctx := context.Background()
	gone := func(ids ...*EntityID) bool {
		for _, id := range ids {
			if id == nil {
				continue
			}
			_, err := getRecord[otaRecord](ctx, te.Engine, kindOtaPackage, id.ID)
			if errors.Is(err, storage.ErrNotFound) {
				return true
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		return false
	}
	devices, err := listRecords[Device](ctx, te.Engine, kindDevice, p.TenantID)
	if err != nil {
		t.Fatal(err)
	}
	profiles, err := listRecords[DeviceProfile](ctx, te.Engine, kindProfile, p.TenantID)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range devices {
		if gone(d.FirmwareID, d.SoftwareID) {
			out = append(out, "device "+d.Name)
		}
	}
	for _, dp := range profiles {
		if gone(dp.FirmwareID, dp.SoftwareID) {
			out = append(out, "profile "+dp.Name)
		}
	}
	return out
}

// wantMissingFirmware checks err is the answer to assigning a missing firmware.
func wantMissingFirmware(t *testing.T, err error) {
	t.Helper()
	wantCode(t, err, CodeBadRequestParams)
	if err.Error() != "Can't assign non-existent firmware!" {
		t.Fatalf("message %q", err)
	}
}

// otaMarked is whether the stored package is marked as being deleted.
func (te *testEngine) otaMarked(t *testing.T, id uuid.UUID) bool {
	t.Helper()
	r, err := getRecord[otaRecord](context.Background(), te.Engine, kindOtaPackage, id)
	if err != nil {
		t.Fatal(err)
	}
	return r.Deleting
}

// TestOtaDeleteRacingDeviceSave: a device given a package while the package
// is being deleted is refused; it never names a deleted package.
func TestOtaDeleteRacingDeviceSave(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)

	// A device created while the deletion lists the devices: the package is
	// marked, the create refused, the deletion done.
	fw := te.otaWithData(t, admin, "marked")
	te.hook("list", kindDevice, func() {
		_, err := te.SaveDevice(ctx, admin, &Device{Name: "late", FirmwareID: &fw.ID}, "")
		wantMissingFirmware(t, err)
	})
	wantCode(t, te.DeleteOtaPackage(ctx, admin, fw.ID.ID), 0)

	// The whole deletion runs between a create's package check and its
	// write: the create takes its device back.
	fw = te.otaWithData(t, admin, "gone")
	te.hook("put", kindDevice, func() { wantCode(t, te.DeleteOtaPackage(ctx, admin, fw.ID.ID), 0) })
	_, err := te.SaveDevice(ctx, admin, &Device{Name: "early", FirmwareID: &fw.ID}, "")
	wantMissingFirmware(t, err)
	if _, err := te.TenantDeviceByName(ctx, admin, "early"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("device of a deleted package kept: %v", err)
	}

	// Likewise an update giving a device a package being deleted: the device
	// keeps no package.
	d, err := te.SaveDevice(ctx, admin, &Device{Name: "updated"}, "")
	if err != nil {
		t.Fatal(err)
	}
	fw = te.otaWithData(t, admin, "gone too")
	te.hook("replace", kindDevice, func() { wantCode(t, te.DeleteOtaPackage(ctx, admin, fw.ID.ID), 0) })
	edit := *d
	edit.FirmwareID = &fw.ID
	_, err = te.SaveDevice(ctx, admin, &edit, "")
	wantMissingFirmware(t, err)
	if got, err := te.GetDevice(ctx, admin, d.ID.ID); err != nil || got.FirmwareID != nil {
		t.Fatalf("device after a refused assignment: %+v %v", got, err)
	}

	// The update's second read finds the package marked by a deletion that
	// has not listed yet (or stopped there): taken back too; a later
	// deletion finishes the marked package.
	fw = te.otaWithData(t, admin, "marked meanwhile")
	te.hook("replace", kindDevice, func() {
		if _, err := te.markOtaDeleting(ctx, admin.TenantID, fw.ID.ID, "test", true); err != nil {
			t.Fatal(err)
		}
	})
	edit = *d
	edit.Version, edit.FirmwareID = 0, &fw.ID
	_, err = te.SaveDevice(ctx, admin, &edit, "")
	wantMissingFirmware(t, err)
	if got, err := te.GetDevice(ctx, admin, d.ID.ID); err != nil || got.FirmwareID != nil {
		t.Fatalf("device after a refused assignment: %+v %v", got, err)
	}
	wantCode(t, te.DeleteOtaPackage(ctx, admin, fw.ID.ID), 0)

	if o := te.danglingOta(t, admin); len(o) > 0 {
		t.Fatalf("deleted packages still assigned: %v", o)
	}
}

// TestOtaDeleteRacingProfileSave: the same for a profile given a package.
func TestOtaDeleteRacingProfileSave(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "raced"})
	if err != nil {
		t.Fatal(err)
	}
	assign := func(fw *OtaPackageInfo) error {
		edit := *dp
		edit.Version, edit.FirmwareID = 0, &fw.ID
		_, err := te.SaveDeviceProfile(ctx, admin, &edit)
		return err
	}
	wantNoFirmware := func() {
		t.Helper()
		got, err := te.GetDeviceProfile(ctx, admin, dp.ID.ID)
		if err != nil || got.FirmwareID != nil {
			t.Fatalf("profile after a refused assignment: %+v %v", got, err)
		}
	}

	// An update while the deletion lists the profiles: refused.
	fw := te.otaWithData(t, admin, "marked")
	te.hook("list", kindProfile, func() { wantMissingFirmware(t, assign(fw)) })
	wantCode(t, te.DeleteOtaPackage(ctx, admin, fw.ID.ID), 0)
	wantNoFirmware()

	// The whole deletion between the update's check and its write.
	fw = te.otaWithData(t, admin, "gone")
	te.hook("replace", kindProfile, func() { wantCode(t, te.DeleteOtaPackage(ctx, admin, fw.ID.ID), 0) })
	wantMissingFirmware(t, assign(fw))
	wantNoFirmware()

	// A new profile given a package deleted meanwhile is deleted itself; one
	// given a package marked meanwhile too.
	for _, race := range []func(id uuid.UUID){
		func(id uuid.UUID) { wantCode(t, te.DeleteOtaPackage(ctx, admin, id), 0) },
		func(id uuid.UUID) {
			if _, err := te.markOtaDeleting(ctx, admin.TenantID, id, "test", true); err != nil {
				t.Fatal(err)
			}
		},
	} {
		fw = te.otaWithData(t, admin, "new "+uuid.NewString())
		te.hook("put", kindProfile, func() { race(fw.ID.ID) })
		_, err = te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "new", FirmwareID: &fw.ID})
		wantMissingFirmware(t, err)
		if _, err := lookupRecord[DeviceProfile](ctx, te.Engine, kindProfile, profileNameKey(admin.TenantID, "new")); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("profile of a deleted package kept: %v", err)
		}
	}
	wantCode(t, te.DeleteOtaPackage(ctx, admin, fw.ID.ID), 0) // the marked one

	if o := te.danglingOta(t, admin); len(o) > 0 {
		t.Fatalf("deleted packages still assigned: %v", o)
	}
}

// TestOtaDeleteMark: a refused deletion unmarks the package; a mark left
// behind (a crash) keeps the package readable and its devices savable,
// survives uploads and info updates, and is finished by the next deletion, or
// dropped by one once it is stale.
func TestOtaDeleteMark(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	fw := te.otaWithData(t, admin, "used")
	holder, err := te.SaveDevice(ctx, admin, &Device{Name: "holder", FirmwareID: &fw.ID}, "")
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.DeleteOtaPackage(ctx, admin, fw.ID.ID), CodeBadRequestParams)
	if te.otaMarked(t, fw.ID.ID) {
		t.Fatal("a refused deletion left its mark")
	}
	if _, err := te.SaveDevice(ctx, admin, &Device{Name: "second", FirmwareID: &fw.ID}, ""); err != nil {
		t.Fatalf("package unassignable after a refused deletion: %v", err)
	}

	// Left marked: still there for reads and for the devices that have it.
	if _, err := te.markOtaDeleting(ctx, admin.TenantID, fw.ID.ID, "test", true); err != nil {
		t.Fatal(err)
	}
	if _, err := te.GetOtaPackageInfo(ctx, admin, fw.ID.ID); err != nil {
		t.Fatalf("marked package: %v", err)
	}
	if _, err := te.DeviceOtaPackage(ctx, holder, OtaFirmware, fw.Title, fw.Version); err != nil {
		t.Fatalf("device download of a marked package: %v", err)
	}
	rename := *holder
	rename.Version, rename.Name = 0, "holder renamed"
	if _, err := te.SaveDevice(ctx, admin, &rename, ""); err != nil {
		t.Fatalf("device keeping a marked package: %v", err)
	}
	_, err = te.SaveDevice(ctx, admin, &Device{Name: "third", FirmwareID: &fw.ID}, "")
	wantMissingFirmware(t, err)

	// An info update keeps the mark.
	update := *fw
	update.AdditionalInfo = []byte(`{"description":"meanwhile"}`)
	if _, err := te.SaveOtaPackageInfo(ctx, admin, &SaveOtaPackageInfoRequest{OtaPackageInfo: update}); err != nil {
		t.Fatal(err)
	}
	if !te.otaMarked(t, fw.ID.ID) {
		t.Fatal("an info update lost the mark")
	}
	// So does an upload finishing.
	up, err := te.SaveOtaPackageInfo(ctx, admin, &SaveOtaPackageInfoRequest{OtaPackageInfo: OtaPackageInfo{
		Type: OtaFirmware, Title: "uploaded", Version: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.markOtaDeleting(ctx, admin.TenantID, up.ID.ID, "test", true); err != nil {
		t.Fatal(err)
	}
	if _, err := te.SaveOtaPackageData(ctx, admin, up.ID.ID, OtaUpload{
		ChecksumAlgorithm: "SHA256", FileName: "f", Data: bytes.NewReader([]byte("x"))}); err != nil {
		t.Fatal(err)
	}
	if !te.otaMarked(t, up.ID.ID) {
		t.Fatal("an upload lost the mark")
	}
	wantCode(t, te.DeleteOtaPackage(ctx, admin, up.ID.ID), 0) // unused: finished

	// Used: the next deletion is refused and takes back its own mark only:
	// the one left behind may be a deletion still under way.
	wantCode(t, te.DeleteOtaPackage(ctx, admin, fw.ID.ID), CodeBadRequestParams)
	if !te.otaMarked(t, fw.ID.ID) {
		t.Fatal("a refused deletion took back another deletion's mark")
	}
	// Past staleDeletion the mark left behind no longer counts, and the next
	// deletion drops it.
	te.now = func() time.Time { return time.Now().Add(staleDeletion + time.Minute) }
	if _, err := te.SaveDevice(ctx, admin, &Device{Name: "third", FirmwareID: &fw.ID}, ""); err != nil {
		t.Fatalf("package unassignable under a stale mark: %v", err)
	}
	wantCode(t, te.DeleteOtaPackage(ctx, admin, fw.ID.ID), CodeBadRequestParams)
	if te.otaMarked(t, fw.ID.ID) {
		t.Fatal("a refused deletion left a stale mark")
	}
}

// TestOtaDeleteRacingSavesLoop: device creates, profile updates and package
// deletions at once never leave a deleted package assigned.
func TestOtaDeleteRacingSavesLoop(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "looped"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		fw := te.otaWithData(t, admin, "p"+uuid.NewString())
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _ = te.SaveDevice(ctx, admin, &Device{Name: "d" + uuid.NewString(), FirmwareID: &fw.ID}, "")
		})
		wg.Go(func() {
			edit := *dp
			edit.Version, edit.FirmwareID = 0, &fw.ID
			_, _ = te.SaveDeviceProfile(ctx, admin, &edit)
		})
		wg.Go(func() { _ = te.DeleteOtaPackage(ctx, admin, fw.ID.ID) })
		wg.Wait()
		if o := te.danglingOta(t, admin); len(o) > 0 {
			t.Fatalf("round %d: deleted packages still assigned: %v", i, o)
		}
	}
}
