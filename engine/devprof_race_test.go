package engine

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// hookStore runs hook once, just before the first call of op ("put",
// "replace" or "list") on a record of kind that it passes on; hook runs on the
// store beneath.
type hookStore struct {
	storage.Backend
	op, kind string
	hook     func()
}

func (s *hookStore) fire(op, kind string) {
	if f := s.hook; f != nil && op == s.op && kind == s.kind {
		s.hook = nil
		f()
	}
}

func (s *hookStore) Put(ctx context.Context, r storage.Record) error {
	s.fire("put", r.Kind)
	return s.Backend.Put(ctx, r)
}

func (s *hookStore) Replace(ctx context.Context, r storage.Record, prev []byte) error {
	s.fire("replace", r.Kind)
	return s.Backend.Replace(ctx, r, prev)
}

func (s *hookStore) List(ctx context.Context, kind string, owner uuid.UUID) ([]storage.Record, error) {
	s.fire("list", kind)
	return s.Backend.List(ctx, kind, owner)
}

// hook arms a hookStore under te: f runs before the next op on kind.
func (te *testEngine) hook(op, kind string, f func()) {
	inner := te.store
	hs := &hookStore{Backend: inner, op: op, kind: kind}
	hs.hook = func() { te.store = inner; f() }
	te.store = hs
}

// orphans lists the devices of p's tenant whose profile is gone.
func (te *testEngine) orphans(t *testing.T, p *Principal) []string {
	t.Helper()
	ctx := context.Background()
	devices, err := listRecords[Device](ctx, te.Engine, kindDevice, p.TenantID)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range devices {
		if _, err := getRecord[DeviceProfile](ctx, te.Engine, kindProfile, d.DeviceProfileID.ID); errors.Is(err, storage.ErrNotFound) {
			out = append(out, d.Name)
		}
	}
	return out
}

// TestProfileDeleteRacingDeviceSave: a device saved while its profile is being
// deleted is refused; it never points to a deleted profile.
func TestProfileDeleteRacingDeviceSave(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	newProfile := func(name string) *DeviceProfile {
		dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return dp
	}

	// A device created while the deletion lists the devices: the profile is
	// marked, the create refused, the deletion done.
	dp := newProfile("marked")
	te.hook("list", kindDevice, func() {
		_, err := te.SaveDevice(ctx, admin, &Device{Name: "late", DeviceProfileID: dp.ID}, "")
		wantCode(t, err, CodeBadRequestParams)
	})
	wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp.ID.ID), 0)

	// The whole deletion runs between a create's profile check and its write:
	// the create takes its device back.
	dp = newProfile("gone")
	te.hook("put", kindDevice, func() { wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp.ID.ID), 0) })
	_, err := te.SaveDevice(ctx, admin, &Device{Name: "early", DeviceProfileID: dp.ID}, "")
	wantCode(t, err, CodeBadRequestParams)
	if _, err := te.TenantDeviceByName(ctx, admin, "early"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("device of a deleted profile kept: %v", err)
	}

	// Likewise an update moving a device to a profile being deleted: the
	// device keeps its old profile.
	d, err := te.SaveDevice(ctx, admin, &Device{Name: "mover"}, "")
	if err != nil {
		t.Fatal(err)
	}
	dp = newProfile("gone too")
	te.hook("replace", kindDevice, func() { wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp.ID.ID), 0) })
	move := *d
	move.DeviceProfileID, move.Type = dp.ID, ""
	_, err = te.SaveDevice(ctx, admin, &move, "")
	wantCode(t, err, CodeBadRequestParams)
	got, err := te.GetDevice(ctx, admin, d.ID.ID)
	if err != nil || got.DeviceProfileID != d.DeviceProfileID || got.Type != d.Type {
		t.Fatalf("device after a refused move: %+v %v", got, err)
	}

	// A deletion refused because of a device leaves the profile usable.
	dp = newProfile("kept")
	if _, err := te.SaveDevice(ctx, admin, &Device{Name: "user", DeviceProfileID: dp.ID}, ""); err != nil {
		t.Fatal(err)
	}
	wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp.ID.ID), CodeBadRequestParams)
	if _, err := te.SaveDevice(ctx, admin, &Device{Name: "user 2", DeviceProfileID: dp.ID}, ""); err != nil {
		t.Fatalf("profile unusable after a refused deletion: %v", err)
	}
	if o := te.orphans(t, admin); len(o) > 0 {
		t.Fatalf("devices of deleted profiles: %v", o)
	}
}

// TestProfileDeleteRacingDeviceSaveLoop: creates and deletions at once never
// leave a device with a deleted profile.
func TestProfileDeleteRacingDeviceSaveLoop(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	for i := range 40 {
		dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "p" + uuid.NewString()})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _ = te.SaveDevice(ctx, admin, &Device{Name: "d" + uuid.NewString(), DeviceProfileID: dp.ID}, "")
		}()
		go func() {
			defer wg.Done()
			_ = te.DeleteDeviceProfile(ctx, admin, dp.ID.ID)
		}()
		wg.Wait()
		if o := te.orphans(t, admin); len(o) > 0 {
			t.Fatalf("round %d: devices of deleted profiles: %v", i, o)
		}
	}
}

// TestProfileUpdateRace: an update overtaken by a deletion is 404, not the
// profile brought back; one overtaken by another update is made again over it.
func TestProfileUpdateRace(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "raced"})
	if err != nil {
		t.Fatal(err)
	}
	overtake := te.overtaker()

	overtake(func() {
		edit := *dp
		edit.Description = "first"
		if _, err := te.SaveDeviceProfile(ctx, admin, &edit); err != nil {
			t.Error(err)
		}
	})
	edit := *dp
	edit.Version = 0 // no version: the latest is overwritten, not lost
	edit.Name = "raced renamed"
	got, err := te.SaveDeviceProfile(ctx, admin, &edit)
	if err != nil || got.Version != dp.Version+2 {
		t.Fatalf("update overtaken by an update: %+v %v", got, err)
	}

	overtake(func() { wantCode(t, te.DeleteDeviceProfile(ctx, admin, dp.ID.ID), 0) })
	edit.Version = 0
	_, err = te.SaveDeviceProfile(ctx, admin, &edit)
	wantCode(t, err, CodeItemNotFound)
	if _, err := te.GetDeviceProfile(ctx, admin, dp.ID.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the deleted profile is back: %v", err)
	}
}

// TestProfileVersionConflict: a client's stale version is 409 as ThingsBoard's
// optimistic lock; no version overwrites.
func TestProfileVersionConflict(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	admin := te.tenantAdmin(t)
	dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "versioned"})
	if err != nil {
		t.Fatal(err)
	}
	a := *dp
	a.Description = "a"
	if _, err := te.SaveDeviceProfile(ctx, admin, &a); err != nil {
		t.Fatal(err)
	}
	b := *dp // still the first version
	b.Description = "b"
	_, err = te.SaveDeviceProfile(ctx, admin, &b)
	wantCode(t, err, CodeVersionConflict)
	if err.Error() != "Device profile was already changed by someone else" {
		t.Fatalf("message %q", err)
	}
	b.Version = 0
	if _, err := te.SaveDeviceProfile(ctx, admin, &b); err != nil {
		t.Fatal(err)
	}
}
