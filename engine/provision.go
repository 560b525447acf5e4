package engine

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// Statuses of a provisioning answer (compat §1.9).
const (
	ProvisionSuccess  = "SUCCESS"
	ProvisionNotFound = "NOT_FOUND"
	ProvisionFailure  = "FAILURE"
)

// Messages of the NOT_FOUND and FAILURE answers, as ThingsBoard words them.
const (
	provisionNotFoundMsg = "Provision data was not found!"
	provisionFailureMsg  = "Failed to provision device!"
	provisionTokenOnly   = "Sluice provisions ACCESS_TOKEN credentials only; credentialsType "
	provisionStateKey    = "provisionState"
	provisionedState     = "provisioned"
)

var errProvisionStrategy = &Error{Code: CodeGeneral, Msg: "Invalid provision strategy type!"}

// ProvisionRequest is the body of POST /api/v1/provision. DeviceName is nil when
// absent; absent and empty are alike (a random name for a new device, as
// ThingsBoard, whose request reads an absent name as ""), a name of spaces
// only is a FAILURE.
type ProvisionRequest struct {
	DeviceName            *string `json:"deviceName"`
	ProvisionDeviceKey    string  `json:"provisionDeviceKey"`
	ProvisionDeviceSecret string  `json:"provisionDeviceSecret"`
	CredentialsType       string  `json:"credentialsType"`
	Token                 string  `json:"token"`
	Gateway               bool    `json:"gateway"`
}

// ProvisionResult is the answer of a processed provision request. Token is set
// only on SUCCESS, ErrorMsg only otherwise.
type ProvisionResult struct {
	Status   string
	Token    string
	ErrorMsg string
}

func provisionNotFound() *ProvisionResult {
	return &ProvisionResult{Status: ProvisionNotFound, ErrorMsg: provisionNotFoundMsg}
}

func provisionFailed(msg string) *ProvisionResult {
	return &ProvisionResult{Status: ProvisionFailure, ErrorMsg: msg}
}

// ProvisionDevice provisions a device with the key and secret of a device profile
// (compat §4). Outcomes the device should see are a result; an error means the
// request could not be processed (storage, or a profile whose strategy cannot be
// used here). Only ACCESS_TOKEN credentials are created: asking a new device for
// another type is a FAILURE saying so. A pre-provisioned device gets the
// credentials it has whatever credentialsType says, as in ThingsBoard
// (DeviceProvisionServiceImpl.processProvision does not read it).
func (e *Engine) ProvisionDevice(ctx context.Context, req *ProvisionRequest) (*ProvisionResult, error) {
	var name string
	if req.DeviceName != nil && *req.DeviceName != "" {
		if name = strings.TrimSpace(*req.DeviceName); name == "" {
			return provisionFailed(provisionFailureMsg), nil
		}
	}
	if req.ProvisionDeviceKey == "" || req.ProvisionDeviceSecret == "" {
		return provisionNotFound(), nil
	}
	dp, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, provisionKeyKey(req.ProvisionDeviceKey))
	if errors.Is(err, storage.ErrNotFound) {
		return provisionNotFound(), nil
	}
	if err != nil {
		return nil, err
	}
	secret := dp.ProfileData.ProvisionConfiguration.ProvisionDeviceSecret
	if dp.ProvisionType == ProvisionDisabled || secret == nil || *secret == "" ||
		!sameSecret(secretHash(req.ProvisionDeviceSecret), secretHash(*secret)) {
		return provisionNotFound(), nil
	}
	switch dp.ProvisionType {
	case ProvisionAllowCreate:
		if req.CredentialsType != "" && req.CredentialsType != CredentialsAccessToken {
			return provisionFailed(provisionTokenOnly + req.CredentialsType + " is not supported"), nil
		}
		return e.provisionNew(ctx, dp, name, req)
	case ProvisionCheckPre:
		return e.provisionExisting(ctx, dp, name)
	}
	return nil, errProvisionStrategy
}

// provisionNew creates the device of an ALLOW_CREATE_NEW_DEVICES profile.
func (e *Engine) provisionNew(ctx context.Context, dp *DeviceProfile, name string, req *ProvisionRequest) (*ProvisionResult, error) {
	tenant := dp.TenantID.ID
	if name == "" {
		name = randomString(20)
	}
	d := &Device{Name: name, DeviceProfileID: dp.ID}
	if req.Gateway {
		d.AdditionalInfo = json.RawMessage(`{"gateway":true}`)
	}
	// saveDevice refuses a taken name or token and a token unfit for a URL; to the
	// device each of these is a FAILURE.
	d, err := e.saveDevice(ctx, tenant, d, req.Token)
	if isEntitiesLimit(err) {
		return provisionFailed(provisionFailureMsg), nil // maxDevices reached: FAILURE, as ThingsBoard
	}
	var ee *Error
	if errors.As(err, &ee) && ee.Code == CodeBadRequestParams {
		return provisionFailed(provisionFailureMsg), nil
	}
	if err != nil {
		return nil, err
	}
	return e.markProvisioned(ctx, d)
}

// provisionExisting hands out the credentials of a device pre-created in a
// CHECK_PRE_PROVISIONED_DEVICES profile, once: a device with any server
// attribute provisionState is a FAILURE, as in ThingsBoard (which logs a
// state other than "provisioned" as unknown). Deleting that attribute allows
// a new provisioning. The check and the write run under the device's
// provisioning guard, so of concurrent requests for one device exactly one
// succeeds; the others are FAILURE, as a second provisioning is.
func (e *Engine) provisionExisting(ctx context.Context, dp *DeviceProfile, name string) (*ProvisionResult, error) {
	if name == "" {
		return provisionFailed(provisionFailureMsg), nil
	}
	d, err := lookupRecord[Device](ctx, e, kindDevice, deviceNameKey(dp.TenantID.ID, name))
	if errors.Is(err, storage.ErrNotFound) {
		return provisionFailed(provisionFailureMsg), nil
	}
	if err != nil {
		return nil, err
	}
	if d.DeviceProfileID.ID != dp.ID.ID {
		return provisionFailed(provisionFailureMsg), nil
	}
	release, err := e.guardProvision(ctx, d)
	if errors.Is(err, errProvisionBusy) {
		return provisionFailed(provisionFailureMsg), nil
	}
	if err != nil {
		return nil, err
	}
	defer release()
	state, err := e.Attributes(ctx, d.ID.ID, storage.ServerScope, []string{provisionStateKey})
	if err != nil {
		return nil, err
	}
	if slices.ContainsFunc(state, func(a kv.Entry) bool { return a.Key == provisionStateKey }) {
		return provisionFailed(provisionFailureMsg), nil
	}
	return e.markProvisioned(ctx, d)
}

// The provisioning guard of a device is a "provision" record holding the
// unique value "device:<id>" while a provisioning checks and sets its
// provisionState: storage lets one Put hold the value, on every node. It is
// deleted when that provisioning ends. One a stopped node left behind is
// taken over once older than provisionGuardTTL (far more than a provisioning
// takes), and device deletion drops it.
const (
	kindProvision     = "provision"
	provisionGuardTTL = time.Minute
)

// errProvisionBusy: another provisioning of the device holds its guard.
var errProvisionBusy = errors.New("the device is being provisioned")

type provisionGuard struct {
	ID       uuid.UUID `json:"id"`
	DeviceID uuid.UUID `json:"deviceId"`
	Created  int64     `json:"created"` // unix ms
}

func provisionGuardKey(device uuid.UUID) string { return "device:" + device.String() }

// guardProvision takes the provisioning guard of d, or answers errProvisionBusy.
// release gives it back; it runs even when ctx is done, for a guard left
// behind would refuse the device for provisionGuardTTL.
func (e *Engine) guardProvision(ctx context.Context, d *Device) (release func(), err error) {
	g := provisionGuard{ID: newID(), DeviceID: d.UUID(), Created: e.now().UnixMilli()}
	for range 2 { // the second try follows the removal of a stale guard
		err := e.putRecord(ctx, kindProvision, g.ID, d.TenantID(), &g, provisionGuardKey(d.UUID()))
		if err == nil {
			return func() { e.releaseProvision(context.WithoutCancel(ctx), g.ID) }, nil
		}
		if !errors.Is(err, storage.ErrConflict) {
			return nil, err
		}
		stale, err := e.dropStaleGuard(ctx, d.UUID())
		if err != nil {
			return nil, err
		}
		if !stale {
			return nil, errProvisionBusy
		}
	}
	return nil, errProvisionBusy
}

// dropStaleGuard deletes the provisioning guard of device if it is older than
// provisionGuardTTL, and reports whether the guard is gone. Deleting by id
// cannot remove a newer guard another request took meanwhile.
func (e *Engine) dropStaleGuard(ctx context.Context, device uuid.UUID) (bool, error) {
	g, err := lookupRecord[provisionGuard](ctx, e, kindProvision, provisionGuardKey(device))
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return true, nil // released meanwhile
	case err != nil:
		return false, err
	case e.now().UnixMilli()-g.Created <= provisionGuardTTL.Milliseconds():
		return false, nil
	}
	return true, ignoreGone(e.deleteRecord(ctx, kindProvision, g.ID))
}

// releaseProvision deletes the guard id. A failure is logged, not returned:
// the provisioning's answer stands, and the guard goes stale.
func (e *Engine) releaseProvision(ctx context.Context, id uuid.UUID) {
	if err := ignoreGone(e.deleteRecord(ctx, kindProvision, id)); err != nil {
		e.cfg.Logger.Warn("cannot release a provisioning guard; the device cannot be provisioned until it goes stale",
			"guard", id, "err", err)
	}
}

// dropProvisionGuard deletes the provisioning guard of a device, if any.
// Device deletion calls it so no guard outlives its device.
func (e *Engine) dropProvisionGuard(ctx context.Context, device uuid.UUID) error {
	g, err := lookupRecord[provisionGuard](ctx, e, kindProvision, provisionGuardKey(device))
	if err != nil {
		return ignoreGone(err)
	}
	return ignoreGone(e.deleteRecord(ctx, kindProvision, g.ID))
}

// markProvisioned sets the server attribute provisionState and answers the
// device's token.
func (e *Engine) markProvisioned(ctx context.Context, d *Device) (*ProvisionResult, error) {
	creds, err := e.credentialsOf(ctx, d.ID.ID)
	if errors.Is(err, storage.ErrNotFound) {
		return provisionFailed(provisionFailureMsg), nil // an interrupted create left no token
	}
	if err != nil {
		return nil, err
	}
	attr := []kv.Entry{{Key: provisionStateKey, Value: kv.StringValue(provisionedState)}}
	if err := e.SaveAttributes(ctx, d.ID.ID, storage.ServerScope, attr); err != nil {
		return nil, err
	}
	return &ProvisionResult{Status: ProvisionSuccess, Token: creds.CredentialsID}, nil
}
