package engine

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

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
// state other than "provisioned" as unknown). Two concurrent requests for the
// same device may both succeed; both receive the same token.
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
	state, err := e.Attributes(ctx, d.ID.ID, storage.ServerScope, []string{provisionStateKey})
	if err != nil {
		return nil, err
	}
	if slices.ContainsFunc(state, func(a kv.Entry) bool { return a.Key == provisionStateKey }) {
		return provisionFailed(provisionFailureMsg), nil
	}
	return e.markProvisioned(ctx, d)
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
