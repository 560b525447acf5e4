package engine

import (
	"context"
	"testing"
	"time"

	"github.com/bytedance/sonic"
)

// TestDeletionMarks: each deletion takes back its own mark only; a stale mark
// stops counting and the next mark drops it; an earlier version's bare flag
// counts until the next deletion ends.
func TestDeletionMarks(t *testing.T) {
	now := time.Now()
	var m deletionMarks
	if m.marked(now) {
		t.Fatal("unmarked record marked")
	}
	if !m.mark("a", now) || !m.mark("b", now) || m.mark("a", now) {
		t.Fatal("mark changes")
	}
	if !m.unmark("b") || m.unmark("b") || !m.marked(now) {
		t.Fatalf("b's unmark took a's mark: %+v", m)
	}
	later := now.Add(staleDeletion + time.Second)
	if m.marked(later) {
		t.Fatal("a stale mark counts")
	}
	m.mark("c", later)
	if len(m.Deletions) != 1 || m.Deletions[0].ID != "c" {
		t.Fatalf("stale mark kept: %+v", m)
	}
	m.unmark("c")
	if m.Deleting || m.marked(later) {
		t.Fatalf("marks left: %+v", m)
	}

	// Stored by an earlier version: {"deleting":true}.
	var r profileRecord
	if err := sonic.Unmarshal([]byte(`{"name":"p","deleting":true}`), &r); err != nil {
		t.Fatal(err)
	}
	if !r.marked(later) {
		t.Fatal("an earlier version's mark does not count")
	}
	r.mark("d", later)
	r.unmark("d")
	if r.marked(later) {
		t.Fatal("an earlier version's mark outlived the next deletion")
	}
	r.mark("e", now)
	b, err := sonic.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	var back profileRecord
	if err := sonic.Unmarshal(b, &back); err != nil || !back.Deleting || len(back.Deletions) != 1 || back.Deletions[0].ID != "e" || back.Name != "p" {
		t.Fatalf("round trip of %s: %+v %v", b, back, err)
	}
}

// TestConcurrentProfileDeletions: a deletion of a profile in use, refused
// while another deletion of it is under way, leaves that one's mark: devices
// and tenants cannot take the profile until it ends.
func TestConcurrentProfileDeletions(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "twice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.SaveDevice(ctx, admin, &Device{Name: "user", DeviceProfileID: dp.ID}, ""); err != nil {
		t.Fatal(err)
	}
	if err := te.markProfileDeleting(ctx, admin, dp.ID.ID, "first", true); err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp.ID.ID), CodeBadRequestParams)
	_, err = te.SaveDevice(ctx, admin, &Device{Name: "late", DeviceProfileID: dp.ID}, "")
	wantCode(t, err, CodeBadRequestParams)
	if err := te.markProfileDeleting(ctx, admin, dp.ID.ID, "first", false); err != nil {
		t.Fatal(err)
	}
	if _, err := te.SaveDevice(ctx, admin, &Device{Name: "late", DeviceProfileID: dp.ID}, ""); err != nil {
		t.Fatalf("profile unusable after both deletions ended: %v", err)
	}

	sys := te.sysadmin(t)
	tp, err := te.SaveTenantProfile(ctx, sys, &TenantProfile{Name: "twice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.SaveTenant(ctx, sys, &Tenant{Title: "user", TenantProfileID: &tp.ID}); err != nil {
		t.Fatal(err)
	}
	if err := te.markTenantProfileDeleting(ctx, tp.ID.ID, "first", true); err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.DeleteTenantProfile(ctx, sys, tp.ID.ID), CodeBadRequestParams)
	_, err = te.SaveTenant(ctx, sys, &Tenant{Title: "late", TenantProfileID: &tp.ID})
	wantCode(t, err, CodeBadRequestParams)
	if err := te.markTenantProfileDeleting(ctx, tp.ID.ID, "first", false); err != nil {
		t.Fatal(err)
	}
	if _, err := te.SaveTenant(ctx, sys, &Tenant{Title: "late", TenantProfileID: &tp.ID}); err != nil {
		t.Fatalf("tenant profile unusable after both deletions ended: %v", err)
	}
}

// TestDeletionOutlivingItsMark: a deletion slower than staleDeletion, whose
// mark stopped counting while it listed the users, does not delete: a save may
// have slipped in. It takes its mark back and asks for a retry.
func TestDeletionOutlivingItsMark(t *testing.T) {
	te := newTestEngine(t)
	ctx, admin := context.Background(), te.tenantAdmin(t)
	dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	te.hook("list", kindDevice, func() {
		te.now = func() time.Time { return time.Now().Add(staleDeletion + time.Minute) }
	})
	wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp.ID.ID), CodeVersionConflict)
	rec, _, err := te.loadProfile(ctx, dp.ID.ID)
	if err != nil || rec.Deleting {
		t.Fatalf("profile after the refused deletion: %+v %v", rec, err)
	}
	te.now = time.Now
	wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp.ID.ID), 0)
}

// TestOtaAndTenantProfileDeletionOutlivingMark: as TestDeletionOutlivingItsMark,
// for the other two marked deletions, OTA packages and tenant profiles: 409,
// the mark taken back, nothing deleted.
func TestOtaAndTenantProfileDeletionOutlivingMark(t *testing.T) {
	te := newTestEngine(t)
	ctx, admin, sys := context.Background(), te.tenantAdmin(t), te.sysadmin(t)
	slow := func() { te.now = func() time.Time { return time.Now().Add(staleDeletion + time.Minute) } }

	fw := te.otaWithData(t, admin, "slow-fw")
	te.hook("list", kindDevice, slow)
	wantCode(t, te.DeleteOtaPackage(ctx, admin, fw.ID.ID), CodeVersionConflict)
	te.now = time.Now
	if r, err := getRecord[otaRecord](ctx, te.Engine, kindOtaPackage, fw.ID.ID); err != nil || r.Deleting {
		t.Fatalf("package after the refused deletion: %+v %v", r, err)
	}
	wantCode(t, te.DeleteOtaPackage(ctx, admin, fw.ID.ID), 0)

	tp, err := te.SaveTenantProfile(ctx, sys, &TenantProfile{Name: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	te.hook("list", kindTenant, slow)
	wantCode(t, te.DeleteTenantProfile(ctx, sys, tp.ID.ID), CodeVersionConflict)
	te.now = time.Now
	if rec, _, err := te.loadTenantProfile(ctx, tp.ID.ID); err != nil || rec.Deleting {
		t.Fatalf("tenant profile after the refused deletion: %+v %v", rec, err)
	}
	wantCode(t, te.DeleteTenantProfile(ctx, sys, tp.ID.ID), 0)
}
