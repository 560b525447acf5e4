package engine

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// rolloutFixture is a profile with n devices following it and a firmware
// package the profile does not have yet.
func rolloutFixture(t *testing.T, te *testEngine, n int) (*DeviceProfile, []uuid.UUID, *OtaPackageInfo) {
	t.Helper()
	ctx, admin := context.Background(), te.tenantAdmin(t)
	dp, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "fleet"})
	if err != nil {
		t.Fatal(err)
	}
	var devices []uuid.UUID
	for i := range n {
		d, err := te.SaveDevice(ctx, admin, &Device{Name: "d" + strconv.Itoa(i), DeviceProfileID: dp.ID}, "")
		if err != nil {
			t.Fatal(err)
		}
		devices = append(devices, d.UUID())
	}
	return dp, devices, te.otaWithData(t, admin, "fleet-fw")
}

// waitRolledOut waits until every device has fw_title title and no rollout
// record is left.
func waitRolledOut(t *testing.T, te *testEngine, devices []uuid.UUID, title string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		done := 0
		for _, d := range devices {
			attrs, err := te.store.GetAttributes(ctx, d, storage.SharedScope, []string{"fw_title"})
			if err != nil {
				t.Fatal(err)
			}
			if len(attrs) == 1 && attrs[0].Value.Str == title {
				done++
			}
		}
		recs, err := te.store.List(ctx, kindOtaRollout, uuid.Nil)
		if err != nil {
			t.Fatal(err)
		}
		if done == len(devices) && len(recs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %d of %d devices rolled out, %d rollout records", done, len(devices), len(recs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOtaRolloutBackground: a profile with more followers than rolloutInline
// answers at once and its devices get the package in the background.
func TestOtaRolloutBackground(t *testing.T) {
	defer func(n int) { rolloutInline = n }(rolloutInline)
	rolloutInline = 2
	te := newTestEngine(t)
	dp, devices, fw := rolloutFixture(t, te, 5)
	dp.FirmwareID = &fw.ID
	if _, err := te.SaveDeviceProfile(context.Background(), te.tenantAdmin(t), dp); err != nil {
		t.Fatal(err)
	}
	waitRolledOut(t, te, devices, "fleet-fw")
}

// TestOtaRolloutResume: a rollout its node stopped before running is taken
// over by another node once its record has gone unrefreshed for
// rolloutStale, not before (its node may be at it).
func TestOtaRolloutResume(t *testing.T) {
	defer func(n int) { rolloutInline = n }(rolloutInline)
	rolloutInline = 0
	te := newTestEngine(t)
	dp, devices, fw := rolloutFixture(t, te, 3)
	te.closeRollouts() // the node stops: what it would start now, it leaves recorded
	dp.FirmwareID = &fw.ID
	if _, err := te.SaveDeviceProfile(context.Background(), te.tenantAdmin(t), dp); err != nil {
		t.Fatal(err)
	}
	recs, err := te.store.List(context.Background(), kindOtaRollout, uuid.Nil)
	if err != nil || len(recs) != 1 {
		t.Fatalf("rollout records after the stop: %d %v", len(recs), err)
	}

	next := &testEngine{Engine: New(te.store, te.cfg), demo: te.demo}
	t.Cleanup(func() { next.Close(context.Background()) })
	if err := next.ResumeRollouts(context.Background()); err != nil {
		t.Fatal(err)
	}
	after, err := te.store.List(context.Background(), kindOtaRollout, uuid.Nil)
	if err != nil || len(after) != 1 || string(after[0].Data) != string(recs[0].Data) {
		t.Fatalf("a fresh rollout record was taken over: %v", err)
	}
	next.now = func() time.Time { return time.Now().Add(rolloutStale + time.Minute) }
	if err := next.sweepRollouts(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitRolledOut(t, next, devices, "fleet-fw")
}

// TestOtaRolloutProfileGone: the record of a rollout whose profile was
// deleted meanwhile is dropped at start.
func TestOtaRolloutProfileGone(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	id := newID()
	if err := te.putRecord(ctx, kindOtaRollout, id, uuid.Nil, &otaRollout{ID: id, ProfileID: newID(), Types: []string{OtaFirmware}}); err != nil {
		t.Fatal(err)
	}
	if err := te.ResumeRollouts(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := te.store.Get(ctx, kindOtaRollout, id); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("record of a gone profile: %v", err)
	}
}

// TestOtaRolloutRecordedFirst: the rollout is recorded before the profile is
// written, also one made within the request, and its record is gone once the
// devices have the package.
func TestOtaRolloutRecordedFirst(t *testing.T) {
	te := newTestEngine(t)
	dp, devices, fw := rolloutFixture(t, te, 2)
	dp.FirmwareID = &fw.ID
	recorded := false
	te.hook("replace", kindProfile, func() {
		recs, err := te.store.List(context.Background(), kindOtaRollout, uuid.Nil)
		recorded = err == nil && len(recs) == 1
	})
	if _, err := te.SaveDeviceProfile(context.Background(), te.tenantAdmin(t), dp); err != nil {
		t.Fatal(err)
	}
	if !recorded {
		t.Fatal("the profile was written before its rollout was recorded")
	}
	waitRolledOut(t, te, devices, "fleet-fw")
}

// TestOtaRolloutRetries: a background rollout that fails on a device tries
// again and then finishes.
func TestOtaRolloutRetries(t *testing.T) {
	defer func(n, tries int, d time.Duration) { rolloutInline, rolloutTries, rolloutRetry = n, tries, d }(rolloutInline, rolloutTries, rolloutRetry)
	rolloutInline, rolloutTries, rolloutRetry = 0, 3, time.Millisecond
	te := newTestEngine(t)
	dp, devices, fw := rolloutFixture(t, te, 3)
	dp.FirmwareID = &fw.ID
	// The first shared-attribute write fails: one device of the first try.
	te.store = &failOnce{Backend: te.store}
	if _, err := te.SaveDeviceProfile(context.Background(), te.tenantAdmin(t), dp); err != nil {
		t.Fatal(err)
	}
	waitRolledOut(t, te, devices, "fleet-fw")
}

// failOnce fails the first shared-attribute write.
type failOnce struct {
	storage.Backend
	failed atomic.Bool
}

func (s *failOnce) SaveAttributes(ctx context.Context, id uuid.UUID, scope storage.Scope, attrs []kv.Entry) error {
	if scope == storage.SharedScope && s.failed.CompareAndSwap(false, true) {
		return errors.New("injected failure")
	}
	return s.Backend.SaveAttributes(ctx, id, scope, attrs)
}

// TestOtaRolloutBeat: a running rollout refreshes its record while it is
// its own, and stops once another run took it over.
func TestOtaRolloutBeat(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	id := newID()
	mine := &otaRollout{ID: id, ProfileID: newID(), Types: []string{OtaFirmware}, Owner: "mine"}
	if err := te.putRecord(ctx, kindOtaRollout, id, uuid.Nil, mine); err != nil {
		t.Fatal(err)
	}
	if err := te.beatRollout(ctx, mine); err != nil {
		t.Fatal(err)
	}
	if r, err := getRecord[otaRollout](ctx, te.Engine, kindOtaRollout, id); err != nil || r.Beat == 0 {
		t.Fatalf("beat not written: %+v %v", r, err)
	}
	taken := *mine
	taken.Owner = "another node's"
	if err := te.putRecord(ctx, kindOtaRollout, id, uuid.Nil, &taken); err != nil {
		t.Fatal(err)
	}
	if err := te.beatRollout(ctx, mine); !errors.Is(err, errRolloutTaken) {
		t.Fatalf("beat of a taken rollout: %v", err)
	}
	dp := &DeviceProfile{}
	stopped := errors.New("stop")
	_, err := te.rollOut(ctx, dp, []string{OtaFirmware}, []*Device{{}}, true, func() error { return stopped }, false)
	if !errors.Is(err, stopped) {
		t.Fatalf("rollOut went on past its beat's error: %v", err)
	}
}

// TestOtaRolloutSavesInARow: a second save's rollout neither stops nor
// replaces the first's; the devices end with the last package and no record
// is left.
func TestOtaRolloutSavesInARow(t *testing.T) {
	defer func(n int) { rolloutInline = n }(rolloutInline)
	rolloutInline = 0
	te := newTestEngine(t)
	ctx, admin := context.Background(), te.tenantAdmin(t)
	dp, devices, fw := rolloutFixture(t, te, 4)
	dp.FirmwareID = &fw.ID
	saved, err := te.SaveDeviceProfile(ctx, admin, dp)
	if err != nil {
		t.Fatal(err)
	}
	fw2 := te.otaWithData(t, admin, "fleet-fw-2")
	saved.FirmwareID = &fw2.ID
	if _, err := te.SaveDeviceProfile(ctx, admin, saved); err != nil {
		t.Fatal(err)
	}
	waitRolledOut(t, te, devices, "fleet-fw-2")
}

// TestOtaRolloutGivenUp: a rollout taken over rolloutMaxTakeovers times is
// dropped at the next sweep, not run for good.
func TestOtaRolloutGivenUp(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	dp, _, _ := rolloutFixture(t, te, 1)
	r := &otaRollout{ID: newID(), ProfileID: dp.ID.ID, TenantID: dp.TenantID.ID, Types: []string{OtaFirmware},
		Owner: "dead", Takeovers: rolloutMaxTakeovers}
	if err := te.putRecord(ctx, kindOtaRollout, r.ID, uuid.Nil, r); err != nil {
		t.Fatal(err)
	}
	if err := te.sweepRollouts(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := te.store.Get(ctx, kindOtaRollout, r.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a rollout past its takeovers is kept: %v", err)
	}
}

// TestOtaRolloutTakeoverSkipsDone: a taken-over run leaves alone the devices
// whose attributes already name the package.
func TestOtaRolloutTakeoverSkipsDone(t *testing.T) {
	te := newTestEngine(t)
	ctx, admin := context.Background(), te.tenantAdmin(t)
	dp, devices, fw := rolloutFixture(t, te, 2)
	dp.FirmwareID = &fw.ID
	if _, err := te.SaveDeviceProfile(ctx, admin, dp); err != nil {
		t.Fatal(err)
	}
	waitRolledOut(t, te, devices, "fleet-fw")
	for _, d := range devices {
		done, err := te.hasOtaState(ctx, d, OtaFirmware, fw.ID.ID)
		if err != nil || !done {
			t.Fatalf("device %s: done=%v err=%v", d, done, err)
		}
	}
	other := te.otaWithData(t, admin, "other")
	if done, err := te.hasOtaState(ctx, devices[0], OtaFirmware, other.ID.ID); err != nil || done {
		t.Fatalf("another package counted as done: %v %v", done, err)
	}
}

// TestOtaRolloutBeatFailsOnce: a beat that fails for a moment (the store, not
// a takeover) stops the pass, and the devices it had not reached yet are
// tried again with the failed ones: the rollout does not end, its record
// deleted, with them never sent the package.
func TestOtaRolloutBeatFailsOnce(t *testing.T) {
	defer func(n, tries int, retry, beat time.Duration) {
		rolloutInline, rolloutTries, rolloutRetry, rolloutBeat = n, tries, retry, beat
	}(rolloutInline, rolloutTries, rolloutRetry, rolloutBeat)
	rolloutInline, rolloutTries, rolloutRetry, rolloutBeat = 0, 3, time.Millisecond, 0
	te := newTestEngine(t)
	dp, devices, fw := rolloutFixture(t, te, 3)
	dp.FirmwareID = &fw.ID
	te.store = &failRolloutReplaceOnce{Backend: te.store}
	if _, err := te.SaveDeviceProfile(context.Background(), te.tenantAdmin(t), dp); err != nil {
		t.Fatal(err)
	}
	waitRolledOut(t, te, devices, "fleet-fw")
}

// failRolloutReplaceOnce fails the first replace of a rollout record (a beat).
type failRolloutReplaceOnce struct {
	storage.Backend
	failed atomic.Bool
}

func (s *failRolloutReplaceOnce) Replace(ctx context.Context, r storage.Record, prev []byte) error {
	if r.Kind == kindOtaRollout && s.failed.CompareAndSwap(false, true) {
		return errors.New("injected failure")
	}
	return s.Backend.Replace(ctx, r, prev)
}

// TestOtaRolloutSweepSeesBeat: a record that looked stale when the sweep
// listed it but whose run refreshed it before the takeover read it is left to
// that run: it is running, not to be run twice.
func TestOtaRolloutSweepSeesBeat(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	dp, _, _ := rolloutFixture(t, te, 1)
	old := time.Now().Add(-rolloutStale - time.Minute).UnixMilli()
	mine := &otaRollout{ID: newID(), ProfileID: dp.ID.ID, TenantID: dp.TenantID.ID, Types: []string{OtaFirmware},
		Owner: "mine", Started: old, Beat: old}
	if err := te.putRecord(ctx, kindOtaRollout, mine.ID, uuid.Nil, mine); err != nil {
		t.Fatal(err)
	}
	te.store = &afterList{Backend: te.store, kind: kindOtaRollout, f: func() {
		if err := te.beatRollout(ctx, mine); err != nil {
			t.Error(err)
		}
	}}
	if err := te.sweepRollouts(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := getRecord[otaRollout](ctx, te.Engine, kindOtaRollout, mine.ID)
	if err != nil || r.Owner != "mine" {
		t.Fatalf("a rollout that beat after the sweep's listing was taken over: %+v %v", r, err)
	}
}

// afterList runs f once, after the first list of kind returns.
type afterList struct {
	storage.Backend
	kind string
	once sync.Once
	f    func()
}

func (s *afterList) List(ctx context.Context, kind string, owner uuid.UUID) ([]storage.Record, error) {
	rs, err := s.Backend.List(ctx, kind, owner)
	if kind == s.kind {
		s.once.Do(s.f)
	}
	return rs, err
}

// TestOtaRolloutRecordOfUnwrittenSave: a save whose profile write lost to
// another update (made again over it, or 409 with the client's version) takes
// back the rollout record it wrote first: nothing was written for it to roll
// out, and a record left behind would cost a takeover of the tenant's devices
// five minutes later.
func TestOtaRolloutRecordOfUnwrittenSave(t *testing.T) {
	te := newTestEngine(t)
	ctx, admin := context.Background(), te.tenantAdmin(t)
	dp, devices, fw := rolloutFixture(t, te, 2)
	other := func() {
		cur, err := te.GetDeviceProfile(ctx, admin, dp.ID.ID)
		if err != nil {
			t.Fatal(err)
		}
		cur.Description += "+"
		if _, err := te.SaveDeviceProfile(ctx, admin, cur); err != nil {
			t.Error(err)
		}
	}
	records := func() int {
		recs, err := te.store.List(ctx, kindOtaRollout, uuid.Nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(recs)
	}

	// The client's version: the save is 409 and changes nothing.
	in := *dp
	in.FirmwareID = &fw.ID
	te.hook("replace", kindProfile, other)
	if _, err := te.SaveDeviceProfile(ctx, admin, &in); !errors.Is(err, errProfileVersion) {
		t.Fatalf("save over a version updated meanwhile: %v, want errProfileVersion", err)
	}
	if n := records(); n != 0 {
		t.Fatalf("%d rollout records after a refused save, want 0", n)
	}

	// A name another profile has: 400, nothing written.
	if _, err := te.SaveDeviceProfile(ctx, admin, &DeviceProfile{Name: "taken"}); err != nil {
		t.Fatal(err)
	}
	renamed := in
	renamed.Version, renamed.Name = 0, "taken"
	if _, err := te.SaveDeviceProfile(ctx, admin, &renamed); !errors.Is(err, errProfileNameTaken) {
		t.Fatalf("save under a taken name: %v, want errProfileNameTaken", err)
	}
	if n := records(); n != 0 {
		t.Fatalf("%d rollout records after a save under a taken name, want 0", n)
	}

	// No version: made again over the other update, rolled out once.
	in.Version = 0
	te.hook("replace", kindProfile, other)
	if _, err := te.SaveDeviceProfile(ctx, admin, &in); err != nil {
		t.Fatal(err)
	}
	waitRolledOut(t, te, devices, "fleet-fw")
}

// TestOtaRolloutSavedLateTakenOver: a save that reaches its rollout long after
// recording it (renaming a large profile's devices) and finds the record taken
// over leaves the run to the node that took it; one that finds it its own
// refreshes it first, so no sweep takes it while it runs.
func TestOtaRolloutSavedLateTakenOver(t *testing.T) {
	te := newTestEngine(t)
	ctx := context.Background()
	dp, devices, fw := rolloutFixture(t, te, 1)
	// The profile as the save wrote it, its devices not yet given the package.
	rec, prev, err := te.loadProfile(ctx, dp.ID.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec.FirmwareID = &fw.ID
	if err := te.writeProfile(ctx, rec, &prev); err != nil {
		t.Fatal(err)
	}
	dp = &rec.DeviceProfile
	old := time.Now().Add(-rolloutStale - time.Minute).UnixMilli()
	record := func(owner string) *otaRollout {
		r := &otaRollout{ID: newID(), ProfileID: dp.ID.ID, TenantID: dp.TenantID.ID, Types: []string{OtaFirmware},
			Owner: owner, Started: old, Beat: old}
		if err := te.putRecord(ctx, kindOtaRollout, r.ID, uuid.Nil, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	fwTitle := func() int {
		attrs, err := te.store.GetAttributes(ctx, devices[0], storage.SharedScope, []string{"fw_title"})
		if err != nil {
			t.Fatal(err)
		}
		return len(attrs)
	}

	taken := record("other node")
	mine := *taken
	mine.Owner = "this save"
	if err := te.otaProfileSaved(ctx, &mine, dp); err != nil || fwTitle() != 0 {
		t.Fatalf("a rollout taken over was run by the late save too: %v, fw_title %d", err, fwTitle())
	}

	own := record("this save")
	if err := te.otaProfileSaved(ctx, own, dp); err != nil || fwTitle() != 1 {
		t.Fatalf("the late save's own rollout: %v, fw_title %d", err, fwTitle())
	}
	if _, err := getRecord[otaRollout](ctx, te.Engine, kindOtaRollout, own.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the finished rollout's record: %v, want it gone", err)
	}
}
