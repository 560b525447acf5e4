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
// Every rollout is recorded before the profile is written (a record of
// kindOtaRollout per profile, owned by the system) and its record deleted
// once every device has the package. A background rollout refreshes its
// record's Beat as it goes; every node looks for records no one refreshed
// for rolloutStale (at its start, then every rolloutSweep) and takes them
// over, one node each (a replace over the version read): a rollout whose node
// was stopped or killed is finished by another node within minutes, and a
// running one is left to its node. A background rollout that fails on some
// devices tries again a few times before it leaves them to that. applyOta
// writes a device only its current package, so a rollout run twice, taken
// over from a node that was only slow, overtaken by a later save of the
// profile or the device, or recorded for a save that then failed, ends on
// what is stored.

const kindOtaRollout = "otaRollout"

// rolloutInline is the most devices a profile save updates within its
// request; rolloutTries and rolloutRetry bound a background rollout's tries.
// Variables for tests.
var (
	rolloutInline = 200
	rolloutTries  = 5
	rolloutRetry  = 30 * time.Second
	// rolloutBeat is how often a running rollout refreshes its record;
	// rolloutStale how long a record may go unrefreshed before another node
	// takes it over (more than the longest wait between two tries, 2 min);
	// rolloutSweep how often a node looks.
	rolloutBeat  = 30 * time.Second
	rolloutStale = 5 * time.Minute
	rolloutSweep = time.Minute
)

// errRolloutTaken stops a rollout whose record names another run: a later
// save's, or a node that took it over.
var errRolloutTaken = errors.New("the rollout was taken over")

// otaRollout is the record of a rollout.
type otaRollout struct {
	ProfileID uuid.UUID `json:"profileId"`
	TenantID  uuid.UUID `json:"tenantId"`
	// Types are OtaFirmware and/or OtaSoftware: what changed.
	Types []string `json:"types"`
	// Run tells this rollout's record from a later save's, or from a node's
	// that took it over.
	Run     string `json:"run"`
	Started int64  `json:"started"` // Unix ms
	// Beat is when the node running it last said so (Unix ms).
	Beat int64 `json:"beat"`
}

// rollouts tracks this node's background rollouts, for Close.
type rollouts struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed bool
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
// when nothing changes.
func (e *Engine) recordRollout(ctx context.Context, dp *DeviceProfile, types []string) (*otaRollout, error) {
	if len(types) == 0 {
		return nil, nil
	}
	now := e.now().UnixMilli()
	r := &otaRollout{ProfileID: dp.ID.ID, TenantID: dp.TenantID.ID, Types: types,
		Run: newID().String(), Started: now, Beat: now}
	if err := e.putRecord(ctx, kindOtaRollout, dp.ID.ID, uuid.Nil, r); err != nil {
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
	devices, err := e.profileFollowers(ctx, dp, r.Types)
	if err != nil {
		return err
	}
	if len(devices) > rolloutInline {
		e.rolloutLater(r, dp, devices)
		return nil
	}
	if err := e.rollOut(ctx, dp, r.Types, devices, false, nil); err != nil {
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
// reports how many failed. beat, when not nil, runs before each device; its
// error stops the rollout.
func (e *Engine) rollOut(ctx context.Context, dp *DeviceProfile, types []string, devices []*Device, keepGoing bool, beat func() error) error {
	failed := 0
	var first error
	for _, typ := range types {
		id := otaIDOf(typ, dp.FirmwareID, dp.SoftwareID)
		for _, d := range devices {
			if otaIDOf(typ, d.FirmwareID, d.SoftwareID) != uuid.Nil {
				continue
			}
			if beat != nil {
				if err := beat(); err != nil {
					return err
				}
			}
			err := e.applyOta(ctx, d, typ, id)
			if err == nil {
				continue
			}
			err = fmt.Errorf("cannot update the %s of device %s: %w", otaPrefixName(typ), d.ID.ID, err)
			if !keepGoing || ctx.Err() != nil {
				return err
			}
			if failed++; first == nil {
				first = err
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d devices not updated, the first: %w", failed, first)
	}
	return nil
}

// rolloutLater runs the rollout r of dp over devices in the background,
// devices that fail skipped and tried again up to rolloutTries times, and
// deletes its record once done. A rollout that still fails, that a later save
// of the profile took over, or that Close stops, leaves the record as it is.
func (e *Engine) rolloutLater(r *otaRollout, dp *DeviceProfile, devices []*Device) {
	ro := &e.rollouts
	ro.mu.Lock()
	defer ro.mu.Unlock()
	if ro.closed {
		return
	}
	if ro.ctx == nil {
		ro.ctx, ro.cancel = context.WithCancel(context.Background())
	}
	ctx := ro.ctx
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
			err := e.rollOut(ctx, dp, r.Types, devices, true, beat)
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
			e.cfg.Logger.Warn("OTA rollout of a device profile: devices not updated, trying again",
				"deviceProfile", r.ProfileID, "in", rolloutRetry*time.Duration(try), "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(rolloutRetry * time.Duration(try)):
			}
			if dp, devices, err = e.rolloutAgain(ctx, r); err != nil || dp == nil {
				return
			}
		}
	})
}

// beatRollout refreshes the Beat of r's record; errRolloutTaken when the
// record names another run (or is gone: a later save's rollout finished).
func (e *Engine) beatRollout(ctx context.Context, r *otaRollout) error {
	for range maxReplaceTries {
		cur, prev, err := loadRecord[otaRollout](ctx, e, kindOtaRollout, r.ProfileID)
		if errors.Is(err, storage.ErrNotFound) || (err == nil && cur.Run != r.Run) {
			return errRolloutTaken
		}
		if err != nil {
			return err
		}
		cur.Beat = e.now().UnixMilli()
		err = e.replaceRecord(ctx, kindOtaRollout, r.ProfileID, uuid.Nil, prev, cur)
		if !errors.Is(err, storage.ErrChanged) {
			return err
		}
	}
	return errChangedMeanwhile
}

// rolloutAgain reads the profile and its followers anew for another try of
// r; a nil profile when r is no longer to run: taken over by a later save's
// rollout, or its profile deleted (its record then deleted too).
func (e *Engine) rolloutAgain(ctx context.Context, r *otaRollout) (*DeviceProfile, []*Device, error) {
	cur, err := getRecord[otaRollout](ctx, e, kindOtaRollout, r.ProfileID)
	if err != nil || cur.Run != r.Run {
		return nil, nil, ignoreGone(err)
	}
	dp, err := getRecord[DeviceProfile](ctx, e, kindProfile, r.ProfileID)
	if errors.Is(err, storage.ErrNotFound) {
		e.finishRollout(ctx, r)
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	devices, err := e.profileFollowers(ctx, dp, r.Types)
	return dp, devices, err
}

// finishRollout deletes the record of r unless a later save of the profile
// recorded its own rollout meanwhile. One recorded between the read and the
// delete is lost with it; its node runs it anyway, and only a stop of that
// node before the end would leave its devices to the next save.
func (e *Engine) finishRollout(ctx context.Context, r *otaRollout) {
	cur, err := getRecord[otaRollout](ctx, e, kindOtaRollout, r.ProfileID)
	if err == nil && cur.Run == r.Run {
		err = e.deleteRecord(ctx, kindOtaRollout, r.ProfileID)
	}
	if err = ignoreGone(err); err != nil {
		e.cfg.Logger.Warn("cannot delete the record of a finished OTA rollout; a node takes it over once its record is stale",
			"deviceProfile", r.ProfileID, "err", err)
	}
}

// ResumeRollouts takes over, in the background, the rollouts whose node
// stopped before finishing them (their records unrefreshed for
// rolloutStale), now and then every rolloutSweep until Close. Call it once
// at start.
func (e *Engine) ResumeRollouts(ctx context.Context) error {
	err := e.sweepRollouts(ctx)
	ro := &e.rollouts
	ro.mu.Lock()
	defer ro.mu.Unlock()
	if ro.closed {
		return err
	}
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

// sweepRollouts takes over every rollout record no node refreshed for
// rolloutStale and runs it.
func (e *Engine) sweepRollouts(ctx context.Context) error {
	recs, err := listRecords[otaRollout](ctx, e, kindOtaRollout, uuid.Nil)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if e.now().UnixMilli()-r.Beat < rolloutStale.Milliseconds() {
			continue // its node is at it
		}
		if err := e.takeOverRollout(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// takeOverRollout makes r's record this node's (a new Run, over the version
// read: of nodes sweeping at once one wins) and runs it.
func (e *Engine) takeOverRollout(ctx context.Context, seen *otaRollout) error {
	r, prev, err := loadRecord[otaRollout](ctx, e, kindOtaRollout, seen.ProfileID)
	if err != nil || r.Run != seen.Run {
		return ignoreGone(err) // finished or taken meanwhile
	}
	dp, err := getRecord[DeviceProfile](ctx, e, kindProfile, r.ProfileID)
	if errors.Is(err, storage.ErrNotFound) {
		// The profile is gone, with its tenant maybe: nothing to roll out.
		return ignoreGone(e.deleteRecord(ctx, kindOtaRollout, r.ProfileID))
	}
	if err != nil {
		return err
	}
	r.Run, r.Beat = newID().String(), e.now().UnixMilli()
	switch err := e.replaceRecord(ctx, kindOtaRollout, r.ProfileID, uuid.Nil, prev, r); {
	case errors.Is(err, storage.ErrChanged), errors.Is(err, storage.ErrNotFound):
		return nil // another node took it, or it finished
	case err != nil:
		return err
	}
	devices, err := e.profileFollowers(ctx, dp, r.Types)
	if err != nil {
		return err
	}
	e.cfg.Logger.Info("taking over an OTA rollout its node left unfinished", "deviceProfile", r.ProfileID, "devices", len(devices))
	e.rolloutLater(r, dp, devices)
	return nil
}

// closeRollouts stops the background rollouts and waits for them; their
// records stay for a node to take over.
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
