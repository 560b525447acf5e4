package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
// A background rollout is recorded before the request answers (a record of
// kindOtaRollout per profile, owned by the system): a node stopped or killed
// before it finished leaves the record, and the next node to start runs it
// again (ResumeRollouts). applyOta writes a device only its current package,
// so a rollout run twice, or overtaken by a later save of the profile or the
// device, ends on what is stored.

const kindOtaRollout = "otaRollout"

// rolloutInline is the most devices a profile save updates within its
// request. A variable for tests.
var rolloutInline = 200

// otaRollout is the record of a background rollout.
type otaRollout struct {
	ProfileID uuid.UUID `json:"profileId"`
	TenantID  uuid.UUID `json:"tenantId"`
	// Types are OtaFirmware and/or OtaSoftware: what changed.
	Types []string `json:"types"`
	// Started (Unix ms) tells this rollout's record from a later one's.
	Started int64 `json:"started"`
}

// rollouts tracks this node's background rollouts, for Close.
type rollouts struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed bool
}

// otaProfileSaved updates every device of a profile that has no package of its
// own, after the profile's firmwareId or softwareId changed (old: the previous
// version, nil for a new profile, which has no devices yet): within the
// request for up to rolloutInline devices, else in the background.
func (e *Engine) otaProfileSaved(ctx context.Context, old, dp *DeviceProfile) error {
	if old == nil {
		return nil
	}
	var types []string
	for _, typ := range []string{OtaFirmware, OtaSoftware} {
		if otaIDOf(typ, dp.FirmwareID, dp.SoftwareID) != otaIDOf(typ, old.FirmwareID, old.SoftwareID) {
			types = append(types, typ)
		}
	}
	if len(types) == 0 {
		return nil
	}
	devices, err := e.profileFollowers(ctx, dp, types)
	if err != nil {
		return err
	}
	if len(devices) <= rolloutInline {
		return e.rollOut(ctx, dp, types, devices)
	}
	r := &otaRollout{ProfileID: dp.ID.ID, TenantID: dp.TenantID.ID, Types: types, Started: e.now().UnixMilli()}
	if err := e.putRecord(ctx, kindOtaRollout, dp.ID.ID, uuid.Nil, r); err != nil {
		return err
	}
	e.rolloutLater(r, dp, devices)
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
func (e *Engine) rollOut(ctx context.Context, dp *DeviceProfile, types []string, devices []*Device) error {
	for _, typ := range types {
		id := otaIDOf(typ, dp.FirmwareID, dp.SoftwareID)
		for _, d := range devices {
			if otaIDOf(typ, d.FirmwareID, d.SoftwareID) != uuid.Nil {
				continue
			}
			if err := e.applyOta(ctx, d, typ, id); err != nil {
				return fmt.Errorf("cannot update the %s of device %s: %w", otaPrefixName(typ), d.ID.ID, err)
			}
		}
	}
	return nil
}

// rolloutLater runs the rollout r of dp over devices in the background and
// deletes its record once done. A rollout that fails, or that Close stops,
// leaves the record for the next start.
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
		if err := e.rollOut(ctx, dp, r.Types, devices); err != nil {
			if ctx.Err() == nil {
				e.cfg.Logger.Warn("OTA rollout of a device profile stopped; the next node start runs it again",
					"deviceProfile", r.ProfileID, "err", err)
			}
			return
		}
		e.finishRollout(ctx, r)
	})
}

// finishRollout deletes the record of r unless a later save of the profile
// recorded its own rollout meanwhile. One recorded between the read and the
// delete is lost with it; its node runs it anyway, and only a stop of that
// node before the end would leave its devices to the next save.
func (e *Engine) finishRollout(ctx context.Context, r *otaRollout) {
	cur, err := getRecord[otaRollout](ctx, e, kindOtaRollout, r.ProfileID)
	if err == nil && cur.Started == r.Started {
		err = e.deleteRecord(ctx, kindOtaRollout, r.ProfileID)
	}
	if err = ignoreGone(err); err != nil {
		e.cfg.Logger.Warn("cannot delete the record of a finished OTA rollout; the next node start runs it again",
			"deviceProfile", r.ProfileID, "err", err)
	}
}

// ResumeRollouts runs, in the background, the rollouts a node stopped before
// it finished them. Call it once at start. The profile's packages are read
// now: a rollout of a package the profile no longer has writes its current
// ones, which every device following it may not have been given yet.
func (e *Engine) ResumeRollouts(ctx context.Context) error {
	recs, err := listRecords[otaRollout](ctx, e, kindOtaRollout, uuid.Nil)
	if err != nil {
		return err
	}
	for _, r := range recs {
		dp, err := getRecord[DeviceProfile](ctx, e, kindProfile, r.ProfileID)
		if errors.Is(err, storage.ErrNotFound) {
			// The profile is gone, with its tenant maybe: nothing to roll out.
			if err := ignoreGone(e.deleteRecord(ctx, kindOtaRollout, r.ProfileID)); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		devices, err := e.profileFollowers(ctx, dp, r.Types)
		if err != nil {
			return err
		}
		e.cfg.Logger.Info("resuming an OTA rollout a node left unfinished", "deviceProfile", r.ProfileID, "devices", len(devices))
		e.rolloutLater(r, dp, devices)
	}
	return nil
}

// closeRollouts stops the background rollouts and waits for them; their
// records stay for the next start.
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
