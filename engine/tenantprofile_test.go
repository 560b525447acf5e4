package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
)

// TestSetDefaultTenantProfile: the default moves; tenants saved without a
// profile get the new one and keep theirs otherwise; the old one may be
// deleted; only system administrators change it.
func TestSetDefaultTenantProfile(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	sys := te.sysadmin(t)
	old, err := te.DefaultTenantProfileInfo(ctx, sys)
	if err != nil {
		t.Fatal(err)
	}
	before, err := te.SaveTenant(ctx, sys, &Tenant{Title: "before"})
	if err != nil || before.TenantProfileID.ID != old.ID.ID {
		t.Fatalf("tenant before: %+v %v", before, err)
	}
	tp, err := te.SaveTenantProfile(ctx, sys, &TenantProfile{Name: "next"})
	if err != nil || tp.Default {
		t.Fatalf("new profile: %+v %v", tp, err)
	}
	got, err := te.SetDefaultTenantProfile(ctx, sys, tp.ID.ID)
	if err != nil || !got.Default || got.Version != tp.Version+1 {
		t.Fatalf("set default: %+v %v", got, err)
	}
	if info, err := te.DefaultTenantProfileInfo(ctx, sys); err != nil || info.ID != tp.ID || info.Name != "next" {
		t.Fatalf("default after the change: %+v %v", info, err)
	}
	if prev, err := te.GetTenantProfile(ctx, sys, old.ID.ID); err != nil || prev.Default {
		t.Fatalf("old default: %+v %v", prev, err)
	}
	after, err := te.SaveTenant(ctx, sys, &Tenant{Title: "after"})
	if err != nil || after.TenantProfileID.ID != tp.ID.ID {
		t.Fatalf("tenant saved without a profile: %+v %v", after, err)
	}
	if kept, err := te.GetTenant(ctx, sys, before.ID.ID); err != nil || kept.TenantProfileID.ID != old.ID.ID {
		t.Fatalf("earlier tenant: %+v %v", kept, err)
	}
	if again, err := te.SetDefaultTenantProfile(ctx, sys, tp.ID.ID); err != nil || again.Version != got.Version {
		t.Fatalf("set default twice: %+v %v", again, err)
	}
	// default:false on the default keeps it the default; an update keeps the flag.
	got.Default = false
	got.Description = "changed"
	if kept, err := te.SaveTenantProfile(ctx, sys, got); err != nil || !kept.Default || kept.Description != "changed" {
		t.Fatalf("default saved with default:false: %+v %v", kept, err)
	}
	wantCode(t, te.DeleteTenantProfile(ctx, sys, tp.ID.ID), CodeBadRequestParams)
	// Back, then the old-new one is deletable once unused.
	if _, err := te.SetDefaultTenantProfile(ctx, sys, old.ID.ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.DeleteTenant(ctx, sys, after.ID.ID), 0)
	wantCode(t, te.DeleteTenantProfile(ctx, sys, tp.ID.ID), 0)

	_, err = te.SetDefaultTenantProfile(ctx, te.tenantAdmin(t), old.ID.ID)
	wantCode(t, err, CodePermissionDenied)
	_, err = te.SetDefaultTenantProfile(ctx, sys, uuid.New())
	wantCode(t, err, CodeItemNotFound)
}

// TestTenantProfileDefaultHalfWay: the default asked for while it is changing
// (the old one demoted, the new one not yet promoted) is the new one; no third
// default is created.
func TestTenantProfileDefaultHalfWay(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	sys := te.sysadmin(t)
	tp, err := te.SaveTenantProfile(ctx, sys, &TenantProfile{Name: "next"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	te.hook("replace", kindTenantProfile, func() { // the mark
		te.hook("replace", kindTenantProfile, func() { // the demotion
			te.hook("replace", kindTenantProfile, func() { // the promotion
				tn, err := te.SaveTenant(ctx, sys, &Tenant{Title: "between"})
				if err != nil || tn.TenantProfileID.ID != tp.ID.ID {
					t.Errorf("tenant saved half-way: %+v %v", tn, err)
				}
				n++
			})
		})
	})
	got, err := te.SetDefaultTenantProfile(ctx, sys, tp.ID.ID)
	if err != nil || !got.Default || n != 1 {
		t.Fatalf("set default: %+v %v (hook ran %d)", got, err, n)
	}
	page, err := te.ListTenantProfiles(ctx, sys, PageLink{PageSize: 10})
	if err != nil || page.TotalElements != 2 {
		t.Fatalf("%d profiles, want 2: %v", page.TotalElements, err)
	}
}

// TestTenantProfileDeleteRacingTenantSave: a tenant saved while its profile is
// being deleted is refused; no tenant is left with a deleted profile.
func TestTenantProfileDeleteRacingTenantSave(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	sys := te.sysadmin(t)
	newProfile := func(name string) *TenantProfile {
		tp, err := te.SaveTenantProfile(ctx, sys, &TenantProfile{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	orphans := func() []string {
		tenants, err := listRecords[Tenant](ctx, te.Engine, kindTenant, uuid.Nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tn := range tenants {
			if _, err := te.GetTenantProfile(ctx, sys, tn.TenantProfileID.ID); errors.Is(err, ErrNotFound) {
				out = append(out, tn.Title)
			}
		}
		return out
	}

	// Created while the deletion lists the tenants: refused, the deletion done.
	tp := newProfile("marked")
	te.hook("list", kindTenant, func() {
		_, err := te.SaveTenant(ctx, sys, &Tenant{Title: "late", TenantProfileID: &tp.ID})
		wantCode(t, err, CodeBadRequestParams)
	})
	wantCode(t, te.DeleteTenantProfile(ctx, sys, tp.ID.ID), 0)

	// The whole deletion between a create's profile check and its write: the
	// create takes its tenant back.
	tp = newProfile("gone")
	te.hook("put", kindTenant, func() { wantCode(t, te.DeleteTenantProfile(ctx, sys, tp.ID.ID), 0) })
	_, err := te.SaveTenant(ctx, sys, &Tenant{Title: "early", TenantProfileID: &tp.ID})
	wantCode(t, err, CodeBadRequestParams)

	// An update moving a tenant to a profile being deleted keeps its old one.
	tn, err := te.SaveTenant(ctx, sys, &Tenant{Title: "mover"})
	if err != nil {
		t.Fatal(err)
	}
	tp = newProfile("gone too")
	te.hook("replace", kindTenant, func() { wantCode(t, te.DeleteTenantProfile(ctx, sys, tp.ID.ID), 0) })
	move := *tn
	move.TenantProfileID = &tp.ID
	_, err = te.SaveTenant(ctx, sys, &move)
	wantCode(t, err, CodeBadRequestParams)
	if got, err := te.GetTenant(ctx, sys, tn.ID.ID); err != nil || got.TenantProfileID.ID != tn.TenantProfileID.ID {
		t.Fatalf("tenant after a refused move: %+v %v", got, err)
	}

	// A deletion refused because of a tenant leaves the profile usable.
	tp = newProfile("kept")
	if _, err := te.SaveTenant(ctx, sys, &Tenant{Title: "user", TenantProfileID: &tp.ID}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.DeleteTenantProfile(ctx, sys, tp.ID.ID), CodeBadRequestParams)
	if _, err := te.SaveTenant(ctx, sys, &Tenant{Title: "user 2", TenantProfileID: &tp.ID}); err != nil {
		t.Fatalf("profile unusable after a refused deletion: %v", err)
	}
	if o := orphans(); len(o) > 0 {
		t.Fatalf("tenants of deleted profiles: %v", o)
	}
}

// TestTenantProfileInfos: the {"id","name"} forms, one and a page sorted by id.
func TestTenantProfileInfos(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	sys := te.sysadmin(t)
	for _, n := range []string{"b", "a", "c"} {
		if _, err := te.SaveTenantProfile(ctx, sys, &TenantProfile{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	page, err := te.ListTenantProfileInfos(ctx, sys, PageLink{PageSize: 10, SortProperty: "id", SortOrder: "DESC"})
	if err != nil || page.TotalElements != 4 {
		t.Fatalf("infos: %+v %v", page, err)
	}
	for i := 1; i < len(page.Data); i++ {
		if page.Data[i-1].ID.ID.String() < page.Data[i].ID.ID.String() {
			t.Fatalf("not sorted by id descending: %+v", page.Data)
		}
	}
	info, err := te.GetTenantProfileInfo(ctx, sys, page.Data[0].ID.ID)
	if err != nil || *info != *page.Data[0] {
		t.Fatalf("info: %+v %v", info, err)
	}
	_, err = te.ListTenantProfileInfos(ctx, sys, PageLink{PageSize: 10, SortProperty: "isDefault"})
	wantCode(t, err, CodeBadRequestParams)
	_, err = te.ListTenantProfileInfos(ctx, te.tenantAdmin(t), PageLink{PageSize: 10})
	wantCode(t, err, CodePermissionDenied)
}

// TestTenantProfileFailedDefaultChange: a change of default that fails before
// the old default lost its flag leaves no mark: the profile stays deletable.
// (One that fails after keeps the mark, which TestTenantProfileDefaultHalfWay's
// finishing of the change relies on.)
func TestTenantProfileFailedDefaultChange(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	sys := te.sysadmin(t)
	old, err := te.DefaultTenantProfileInfo(ctx, sys)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := te.SaveTenantProfile(ctx, sys, &TenantProfile{Name: "next"})
	if err != nil {
		t.Fatal(err)
	}
	// The demotion keeps being overtaken: the change fails, the default stays.
	var overtake func()
	overtake = func() {
		te.hook("replace", kindTenantProfile, func() {
			cur, prev, err := te.loadTenantProfile(ctx, old.ID.ID)
			if err == nil {
				cur.Description += "."
				te.writeTenantProfile(ctx, cur, &prev)
			}
			overtake()
		})
	}
	te.hook("replace", kindTenantProfile, overtake) // after the mark's write
	_, err = te.SetDefaultTenantProfile(ctx, sys, tp.ID.ID)
	te.store = te.store.(*hookStore).Backend
	wantCode(t, err, CodeVersionConflict)
	if info, err := te.DefaultTenantProfileInfo(ctx, sys); err != nil || info.ID != old.ID {
		t.Fatalf("default after a failed change: %+v %v", info, err)
	}
	wantCode(t, te.DeleteTenantProfile(ctx, sys, tp.ID.ID), 0) // not held as "the default"
}
