package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// A device profile's change of firmware or software reaches the devices that
// follow the profile (no package of their own). ThingsBoard hands each to its
// OTA queue. Sluice writes them within the request while they are few
// (rolloutInline), so a client reads the result at once, and past that in
// the background: at about 2 ms a device, a profile of 100,000 devices would
// hold its request for minutes, past any client's timeout.
//
// Every save that changes a package records its rollout before the profile
// is written (a record of kindOtaRollout of its own, owned by the system) and
// deletes it once every device has the package. Records are per save, not
// per profile: a later save neither replaces nor stops an earlier save's
// rollout, and both run (applyOta writes a device only its current package,
// so the earlier one skips what the later one changed). A background rollout
// refreshes its record's Beat as it goes; every node looks for records no one
// refreshed for rolloutStale (at its start, then every rolloutSweep) and
// takes them over, one node each (a replace over the version read, with a
// new Owner that stops the old run at its next beat): a rollout whose node was
// stopped or killed is finished by another node within minutes. A taken-over
// run skips the devices whose attributes already name the package, so they are
// not sent it again. A rollout that fails on some devices tries them again a
// few times; one taken over rolloutMaxTakeovers times is given up (an ERROR).

const kindOtaRollout = "otaRollout"

// Variables for tests.
var (
	// rolloutInline is the most devices a profile save updates within its
	// request.
	rolloutInline = 200
	// rolloutTries and rolloutRetry bound the tries of a background run on
	// the devices that failed.
	rolloutTries = 5
	rolloutRetry = 30 * time.Second
	// rolloutBeat is how often a running rollout refreshes its record;
	// rolloutStale how long a record may go unrefreshed before another node
	// takes it over (more than the longest wait between two tries, 2 min);
	// rolloutSweep how often a node looks; rolloutMaxTakeovers how many
	// takeovers a rollout gets before it is given up.
	rolloutBeat         = 30 * time.Second
	rolloutStale        = 5 * time.Minute
	rolloutSweep        = time.Minute
	rolloutMaxTakeovers = 3
)

// errRolloutTaken stops a run whose record another node took over (or
// finished: the record is gone).
var errRolloutTaken = errors.New("the rollout was taken over")

// otaRollout is the record of a rollout.
type otaRollout struct {
	ID        uuid.UUID `json:"id"`
	ProfileID uuid.UUID `json:"profileId"`
	TenantID  uuid.UUID `json:"tenantId"`
	// Types are OtaFirmware and/or OtaSoftware: what changed.
	Types []string `json:"types"`
	// Owner names the run at it: a new one at each takeover.
	Owner   string `json:"owner"`
	Started int64  `json:"started"` // Unix ms
	// Beat is when the run at it last said so (Unix ms).
	Beat      int64 `json:"beat"`
	Takeovers int   `json:"takeovers,omitempty"`
}

// rollouts tracks this node's background rollouts and its sweep, for Close.
type rollouts struct {
	mu       sync.Mutex
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closed   bool
	sweeping bool
}

// otaChanges lists the package types whose package differs between the
// stored profile old and dp, about to replace it.
func otaChanges(old, dp *DeviceProfile) []string {
	var types []string
	for _, typ := range []string{OtaFirmware, OtaSoftware} {
		if otaIDOf(typ, dp.FirmwareID, dp.SoftwareID) != otaIDOf(typ, old.FirmwareID, old.SoftwareID) {
			types = append(types, typ)
		}
	}
	return types
}

// recordRollout records the rollout of types of dp before dp is written; nil
// when nothing changes. A save that then fails leaves a record whose run (a
// takeover) finds every device as it is.
func (e *Engine) recordRollout(ctx context.Context, dp *DeviceProfile, types []string) (*otaRollout, error) {
	if len(types) == 0 {
		return nil, nil
	}
	now := e.now().UnixMilli()
	r := &otaRollout{ID: newID(), ProfileID: dp.ID.ID, TenantID: dp.TenantID.ID, Types: types,
		Owner: newID().String(), Started: now, Beat: now}
	if err := e.putRecord(ctx, kindOtaRollout, r.ID, uuid.Nil, r); err != nil {
		return nil, err
	}
	return r, nil
}

// otaProfileSaved runs rollout r (nil: nothing to do) of the saved profile dp
// over the devices that follow it: within the request for up to
// rolloutInline devices, else in the background.
func (e *Engine) otaProfileSaved(ctx context.Context, r *otaRollout, dp *DeviceProfile) error {
	if r == nil {
		return nil
	}
	if e.now().UnixMilli()-r.Beat >= (rolloutStale / 2).Milliseconds() {
		// The save took long since it recorded the rollout (renaming a large
		// profile's devices): a record near stale, or stale and taken over,
		// is refreshed or left to the node that took it. Any other failure
		// to refresh it leaves it as it is: the run goes on.
		if err := e.beatRollout(ctx, r); errors.Is(err, errRolloutTaken) {
			return nil
		}
	}
	devices, err := e.profileFollowers(ctx, dp, r.Types)
	if err != nil {
		return err
	}
	if len(devices) > rolloutInline {
		e.rolloutLater(r, dp, devices, false)
		return nil
	}
	if _, err := e.rollOut(ctx, dp, r.Types, devices, false, nil, false); err != nil {
		return err // the record stays: a node's sweep takes it over once stale
	}
	e.finishRollout(ctx, r)
	return nil
}

// profileFollowers lists the devices of profile dp without a package of their
// own of one of types.
func (e *Engine) profileFollowers(ctx context.Context, dp *DeviceProfile, types []string) ([]*Device, error) {
	all, err := listRecords[Device](ctx, e, kindDevice, dp.TenantID.ID)
	if err != nil {
		return nil, err
	}
	var out []*Device
	for _, d := range all {
		if d.DeviceProfileID.ID != dp.ID.ID {
			continue
		}
		for _, typ := range types {
			if otaIDOf(typ, d.FirmwareID, d.SoftwareID) == uuid.Nil {
				out = append(out, d)
				break
			}
		}
	}
	return out, nil
}

// rollOut gives each of devices dp's package of each of types it follows.
// It stops at the first failure, or with keepGoing tries every device and
// returns those that failed. beat, when not nil, runs before each device; its
// error stops the rollout. With skipDone a device whose attributes already
// name the package is left alone (a taken-over run: the run before may have
// sent it). A stopped rollout returns, with the failed devices, those it had
// not reached: a beat's error may pass (the store, not a takeover), and the
// retry takes only what is returned.
func (e *Engine) rollOut(ctx context.Context, dp *DeviceProfile, types []string, devices []*Device,
	keepGoing bool, beat func() error, skipDone bool) (failed []*Device, err error) {
	var first error
	for i, d := range devices {
		if beat != nil {
			if err := beat(); err != nil {
				return append(failed, devices[i:]...), err
			}
		}
		err := e.rollOutDevice(ctx, dp, types, d, skipDone)
		if err == nil {
			continue
		}
		if !keepGoing || ctx.Err() != nil {
			return append(failed, devices[i:]...), err
		}
		failed = append(failed, d)
		if first == nil {
			first = err
		}
	}
	if len(failed) > 0 {
		return failed, fmt.Errorf("%d devices not updated, the first: %w", len(failed), first)
	}
	return nil, nil
}

// rollOutDevice gives device d dp's package of each of types it follows (no
// package of its own), trying every type; the first error.
func (e *Engine) rollOutDevice(ctx context.Context, dp *DeviceProfile, types []string, d *Device, skipDone bool) error {
	var first error
	for _, typ := range types {
		if otaIDOf(typ, d.FirmwareID, d.SoftwareID) != uuid.Nil {
			continue
		}
		err := e.rollOutOne(ctx, d, typ, otaIDOf(typ, dp.FirmwareID, dp.SoftwareID), skipDone)
		if err != nil && first == nil {
			first = fmt.Errorf("cannot update the %s of device %s: %w", otaPrefixName(typ), d.ID.ID, err)
		}
	}
	return first
}

// rollOutOne applies package id of type typ to device d, unless skipDone and
// its attributes already name it.
func (e *Engine) rollOutOne(ctx context.Context, d *Device, typ string, id uuid.UUID, skipDone bool) error {
	if skipDone {
		done, err := e.hasOtaState(ctx, d.UUID(), typ, id)
		if err != nil || done {
			return err
		}
	}
	return e.applyOta(ctx, d, typ, id)
}

// hasOtaState is whether the device's shared attributes already name package
// id of type typ (its title and version), or, for none, hold no key of typ.
func (e *Engine) hasOtaState(ctx context.Context, device uuid.UUID, typ string, id uuid.UUID) (bool, error) {
	if id == uuid.Nil {
		attrs, err := e.store.GetAttributes(ctx, device, storage.SharedScope, otaAttributeKeys(typ))
		return len(attrs) == 0, err
	}
	r, err := getRecord[otaRecord](ctx, e, kindOtaPackage, id)
	if err != nil {
		return false, ignoreGone(err) // gone: applyOta removes the state
	}
	p := otaPrefix(typ)
	attrs, err := e.store.GetAttributes(ctx, device, storage.SharedScope, []string{p + "_title", p + "_version"})
	if err != nil {
		return false, err
	}
	has := 0
	for _, a := range attrs {
		if (a.Key == p+"_title" && a.Value.Str == r.Title) || (a.Key == p+"_version" && a.Value.Str == r.Version) {
			has++
		}
	}
	return has == 2, nil
}

// rolloutLater runs the rollout r of dp over devices in the background, the
// devices that fail tried again up to rolloutTries times, and deletes its
// record once done. A run that still fails, that another node took over, or
// that Close stops, leaves the record to a takeover.
func (e *Engine) rolloutLater(r *otaRollout, dp *DeviceProfile, devices []*Device, skipDone bool) {
	ro := &e.rollouts
	ro.mu.Lock()
	defer ro.mu.Unlock()
	if ro.closed {
		return
	}
	if ro.ctx == nil {
		ro.ctx, ro.cancel = context.WithCancel(context.Background())
	}
	ctx, dp := ro.ctx, detachPackages(dp)
	ro.wg.Go(func() {
		last := time.Now()
		beat := func() error {
			if time.Since(last) < rolloutBeat {
				return nil
			}
			last = time.Now()
			return e.beatRollout(ctx, r)
		}
		for try := 1; ; try++ {
			failed, err := e.rollOut(ctx, dp, r.Types, devices, true, beat, skipDone)
			if err == nil {
				e.finishRollout(ctx, r)
				return
			}
			if ctx.Err() != nil || errors.Is(err, errRolloutTaken) {
				return
			}
			if try == rolloutTries {
				e.cfg.Logger.Warn("OTA rollout of a device profile left unfinished; a node takes it over once its record is stale",
					"deviceProfile", r.ProfileID, "tries", try, "err", err)
				return
			}
			e.cfg.Logger.Warn("OTA rollout of a device profile: devices not updated, trying them again",
				"deviceProfile", r.ProfileID, "devices", len(failed), "in", rolloutRetry*time.Duration(try), "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(rolloutRetry * time.Duration(try)):
			}
			if err := e.beatRollout(ctx, r); err != nil {
				return // taken over meanwhile, or the store is down: a takeover follows
			}
			last, devices = time.Now(), failed
		}
	})
}

// detachPackages is a copy of dp for a background run: dp is the profile the
// save returns to its caller, who may change it while the run reads it.
func detachPackages(dp *DeviceProfile) *DeviceProfile {
	c := *dp
	for _, id := range []**EntityID{&c.FirmwareID, &c.SoftwareID} {
		if *id != nil {
			v := **id
			*id = &v
		}
	}
	return &c
}

// beatRollout refreshes the Beat of r's record; errRolloutTaken when the
// record has another owner, or is gone.
func (e *Engine) beatRollout(ctx context.Context, r *otaRollout) error {
	for range maxReplaceTries {
		cur, prev, err := loadRecord[otaRollout](ctx, e, kindOtaRollout, r.ID)
		if errors.Is(err, storage.ErrNotFound) || (err == nil && cur.Owner != r.Owner) {
			return errRolloutTaken
		}
		if err != nil {
			return err
		}
		cur.Beat = e.now().UnixMilli()
		err = e.replaceRecord(ctx, kindOtaRollout, r.ID, uuid.Nil, prev, cur)
		if !errors.Is(err, storage.ErrChanged) {
			return err
		}
	}
	return errChangedMeanwhile
}

// finishRollout deletes the record of r, done. A takeover between the read
// and the delete loses its record with it, but the rollout it took over is
// done.
func (e *Engine) finishRollout(ctx context.Context, r *otaRollout) {
	cur, err := getRecord[otaRollout](ctx, e, kindOtaRollout, r.ID)
	if err == nil && cur.Owner == r.Owner {
		err = e.deleteRecord(ctx, kindOtaRollout, r.ID)
	}
	if err = ignoreGone(err); err != nil {
		e.cfg.Logger.Warn("cannot delete the record of a finished OTA rollout; a node takes it over once its record is stale",
			"deviceProfile", r.ProfileID, "err", err)
	}
}

// ResumeRollouts takes over, in the background, the rollouts whose node
// stopped before finishing them (their records unrefreshed for
// rolloutStale), now and then every rolloutSweep until Close. Call it at
// start; later calls only sweep.
func (e *Engine) ResumeRollouts(ctx context.Context) error {
	err := e.sweepRollouts(ctx)
	ro := &e.rollouts
	ro.mu.Lock()
	defer ro.mu.Unlock()
	if ro.closed || ro.sweeping {
		return err
	}
	ro.sweeping = true
	if ro.ctx == nil {
		ro.ctx, ro.cancel = context.WithCancel(context.Background())
	}
	sweepCtx := ro.ctx
	ro.wg.Go(func() {
		t := time.NewTicker(rolloutSweep)
		defer t.Stop()
		for {
			select {
			case <-sweepCtx.Done():
				return
			case <-t.C:
			}
			if err := e.sweepRollouts(sweepCtx); err != nil && sweepCtx.Err() == nil {
				e.cfg.Logger.Warn("cannot look for unfinished OTA rollouts; trying again later", "err", err)
			}
		}
	})
	return err
}

// sweepRollouts takes over every rollout record no run refreshed for
// rolloutStale; one that cannot be taken over now is left for the next sweep.
func (e *Engine) sweepRollouts(ctx context.Context) error {
	recs, err := listRecords[otaRollout](ctx, e, kindOtaRollout, uuid.Nil)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range recs {
		if e.now().UnixMilli()-r.Beat < rolloutStale.Milliseconds() {
			continue // its run is at it
		}
		if err := e.takeOverRollout(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// takeOverRollout makes the record of seen this node's (a new Owner, over the
// version read: of nodes sweeping at once one wins) and runs it, skipping the
// devices the run before got to. One taken over rolloutMaxTakeovers times
// already is given up.
func (e *Engine) takeOverRollout(ctx context.Context, seen *otaRollout) error {
	r, prev, err := loadRecord[otaRollout](ctx, e, kindOtaRollout, seen.ID)
	if err != nil || r.Owner != seen.Owner || r.Beat != seen.Beat {
		// Finished, taken or refreshed since the sweep listed it (a list is
		// as old as the takeovers before it): its run is at it.
		return ignoreGone(err)
	}
	if r.Takeovers >= rolloutMaxTakeovers {
		e.cfg.Logger.Error("OTA rollout of a device profile given up after failing on every node that took it over; save the profile's package again to retry",
			"deviceProfile", r.ProfileID, "takeovers", r.Takeovers)
		return ignoreGone(e.deleteRecord(ctx, kindOtaRollout, r.ID))
	}
	dp, err := getRecord[DeviceProfile](ctx, e, kindProfile, r.ProfileID)
	if errors.Is(err, storage.ErrNotFound) {
		// The profile is gone, with its tenant maybe: nothing to roll out.
		return ignoreGone(e.deleteRecord(ctx, kindOtaRollout, r.ID))
	}
	if err != nil {
		return err
	}
	devices, err := e.profileFollowers(ctx, dp, r.Types)
	if err != nil {
		return err
	}
	r.Owner, r.Beat, r.Takeovers = newID().String(), e.now().UnixMilli(), r.Takeovers+1
	switch err := e.replaceRecord(ctx, kindOtaRollout, r.ID, uuid.Nil, prev, r); {
	case errors.Is(err, storage.ErrChanged), errors.Is(err, storage.ErrNotFound):
		return nil // another node took it, or it finished
	case err != nil:
		return err
	}
	e.cfg.Logger.Info("taking over an OTA rollout its node left unfinished", "deviceProfile", r.ProfileID, "devices", len(devices))
	e.rolloutLater(r, dp, devices, true)
	return nil
}

// closeRollouts stops the background rollouts and the sweep and waits for
// them; their records stay for a node to take over.
func (e *Engine) closeRollouts() {
	ro := &e.rollouts
	ro.mu.Lock()
	ro.closed = true
	if ro.cancel != nil {
		ro.cancel()
	}
	ro.mu.Unlock()
	ro.wg.Wait()
}
