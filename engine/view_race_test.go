package engine

import (
	"context"
	"errors"
	"testing"
)

// TestViewUpdateRace: a view update is written only over the version it read.
// One overtaken by a deletion is 404, not the view brought back; one overtaken
// by a profile rename does not undo it; one overtaken by another update is
// made again over it.
func TestViewUpdateRace(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "meter"})
	if err != nil {
		t.Fatal(err)
	}
	newView := func(name string) *View {
		v, err := te.SaveView(ctx, admin, &View{Name: name, Source: ViewSource{DeviceProfile: "meter"},
			Fields: []ViewField{{Label: "Device", Source: SourceEntityName}}})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	edit := func(v *View, name string) *View { e := *v; e.Name, e.Version = name, 0; return &e }

	// Deleted between the update's read and its write.
	v := newView("deleted")
	te.hook("replace", kindView, func() { wantCode(t, te.DeleteView(ctx, admin, v.ID.ID), 0) })
	_, err = te.SaveView(ctx, admin, edit(v, "back"))
	wantCode(t, err, CodeItemNotFound)
	if _, err := te.GetView(ctx, admin, v.ID.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the deleted view is back: %v", err)
	}

	// Another update first: this one is made over it.
	v = newView("updated")
	te.hook("replace", kindView, func() {
		if _, err := te.SaveView(ctx, admin, edit(v, "first")); err != nil {
			t.Error(err)
		}
	})
	got, err := te.SaveView(ctx, admin, edit(v, "second"))
	if err != nil || got.Name != "second" || got.Version != v.Version+2 || got.CreatedTime != v.CreatedTime {
		t.Fatalf("update overtaken by an update: %+v %v", got, err)
	}

	// The profile renamed meanwhile (renameViewSource moves the view): the
	// update, made again over the moved view, names a profile that is gone.
	te.hook("replace", kindView, func() {
		ren := *dp
		ren.Name, ren.Version = "smart meter", 0
		if _, err := te.SaveDeviceProfile(ctx, admin, &ren); err != nil {
			t.Error(err)
		}
	})
	_, err = te.SaveView(ctx, admin, edit(got, "third"))
	wantCode(t, err, CodeBadRequestParams)
	if now, err := te.GetView(ctx, admin, v.ID.ID); err != nil || now.Source.DeviceProfile != "smart meter" || now.Name != "second" {
		t.Fatalf("view after an update that raced a profile rename: %+v %v", now, err)
	}
}

// TestViewVersionConflict: a client's stale version is 409, as for devices; no
// version overwrites whatever is stored.
func TestViewVersionConflict(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	v, err := te.SaveView(ctx, admin, &View{Name: "versioned", Source: ViewSource{DeviceProfile: "default"},
		Fields: []ViewField{{Label: "Device", Source: SourceEntityName}}})
	if err != nil {
		t.Fatal(err)
	}
	a := *v
	a.Name = "a"
	if got, err := te.SaveView(ctx, admin, &a); err != nil || got.Version != v.Version+1 {
		t.Fatalf("update with the stored version: %+v %v", got, err)
	}
	b := *v // still the first version
	b.Name = "b"
	_, err = te.SaveView(ctx, admin, &b)
	wantCode(t, err, CodeVersionConflict)
	if err.Error() != "Analytics view was already changed by someone else" {
		t.Fatalf("message %q", err)
	}
	b.Version = 0
	if got, err := te.SaveView(ctx, admin, &b); err != nil || got.Name != "b" || got.Version != v.Version+2 {
		t.Fatalf("update without a version: %+v %v", got, err)
	}

	// The version read is gone by the write: 409 too, not written over.
	c := *v
	c.Name, c.Version = "c", v.Version+2
	te.hook("replace", kindView, func() {
		if _, err := te.SaveView(ctx, admin, &View{ID: v.ID, Name: "d", Source: v.Source, Fields: v.Fields}); err != nil {
			t.Error(err)
		}
	})
	_, err = te.SaveView(ctx, admin, &c)
	wantCode(t, err, CodeVersionConflict)
	if got, err := te.GetView(ctx, admin, v.ID.ID); err != nil || got.Name != "d" {
		t.Fatalf("view after a conflicting update: %+v %v", got, err)
	}
}
