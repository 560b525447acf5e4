package engine

import (
	"context"
	"errors"
	"strings"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

var (
	// ThingsBoard's DeviceCredentialsDataValidator (validateCreate and
	// validateUpdate) for a token another device has. Its "Specified
	// credentials are already registered!" answers only a unique-constraint
	// race past that check; here the unique key is the check, so every case
	// gets the validator's text.
	errTokenTaken     = &Error{Code: CodeBadRequestParams, Msg: "Device credentials are already assigned to another device!"}
	errCredsNoDevice  = &Error{Code: CodeBadRequestParams, Msg: "Device credentials should be assigned to device!"}
	errCredsNoID      = &Error{Code: CodeBadRequestParams, Msg: "Device credentials id should be specified!"}
	errCredsNoType    = &Error{Code: CodeBadRequestParams, Msg: "Device credentials type should be specified!"}
	errBadAccessToken = &Error{Code: CodeBadRequestParams, Msg: "Access token must not contain whitespace, '/', '?', '#' or '%' and must be at most 255 characters"}
	errTokenControl   = &Error{Code: CodeBadRequestParams, Msg: "credentialsId must not contain control characters!"}
	errTokenDots      = &Error{Code: CodeBadRequestParams, Msg: "Access token must not be '.' or '..'"}
)

// checkAccessToken refuses tokens a device could not put in its URL path.
func checkAccessToken(token string) error {
	if token == "" {
		return errCredsNoID
	}
	// ThingsBoard's DeviceCredentialsDataValidator: [\x00-\x1F\x7F].
	if strings.ContainsFunc(token, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return errTokenControl
	}
	if len(token) > 255 || strings.ContainsAny(token, " /?#%") {
		return errBadAccessToken
	}
	// /api/v1/./telemetry is /api/v1/telemetry to a proxy that cleans paths.
	if token == "." || token == ".." {
		return errTokenDots
	}
	return nil
}

// notFoundByID is an unknown id answered as ThingsBoard's checkEntityId does
// ("<Type> with id [<id>] is not found", BaseController.checkEntityId). To
// errors.Is it is ErrNotFound too, so callers that skip unknown ids (byIDs)
// still do; errors.As finds the *Error with its message.
type notFoundByID struct{ err *Error }

func (e *notFoundByID) Error() string        { return e.err.Msg }
func (e *notFoundByID) Unwrap() error        { return e.err }
func (e *notFoundByID) Is(target error) bool { return target == ErrNotFound }

// deviceNotFound is ThingsBoard's checkDeviceId answer for an unknown device.
func deviceNotFound(id uuid.UUID) error {
	return &notFoundByID{Errorf(CodeItemNotFound, "Device with id [%s] is not found", id)}
}

// customerNotFound is ThingsBoard's checkCustomerId answer for an unknown customer.
func customerNotFound(id uuid.UUID) error {
	return &notFoundByID{Errorf(CodeItemNotFound, "Customer with id [%s] is not found", id)}
}

// orDeviceNotFound words a missing device (storage.ErrNotFound, ErrNotFound)
// as deviceNotFound and passes other errors on.
func orDeviceNotFound(err error, id uuid.UUID) error {
	if errors.Is(err, storage.ErrNotFound) || errors.Is(err, ErrNotFound) {
		return deviceNotFound(id)
	}
	return err
}

// orCustomerNotFound is orDeviceNotFound for a customer.
func orCustomerNotFound(err error, id uuid.UUID) error {
	if errors.Is(err, storage.ErrNotFound) || errors.Is(err, ErrNotFound) {
		return customerNotFound(id)
	}
	return err
}

// putCredentials stores c with its unique token and device. A token that belongs to
// another device is errTokenTaken.
func (e *Engine) putCredentials(ctx context.Context, tenant uuid.UUID, c *DeviceCredentials) error {
	return e.writeCredentials(ctx, tenant, c, nil)
}

// writeCredentials stores c: with Put, or over the version read as *prev.
func (e *Engine) writeCredentials(ctx context.Context, tenant uuid.UUID, c *DeviceCredentials, prev *[]byte) error {
	err := e.writeRecord(ctx, kindCredentials, c.ID.ID, tenant, prev, c, []string{tokenKey(c.CredentialsID), credsDeviceKey(c.DeviceID.ID)})
	if errors.Is(err, storage.ErrConflict) {
		return errTokenTaken
	}
	return err
}

// createCredentials gives a new device its access token.
func (e *Engine) createCredentials(ctx context.Context, tenant, deviceID uuid.UUID, token string) (*DeviceCredentials, error) {
	c := &DeviceCredentials{
		ID:              CredentialsID{ID: newID()},
		CreatedTime:     e.now().UnixMilli(),
		DeviceID:        newEntityID(EntityDevice, deviceID),
		CredentialsType: CredentialsAccessToken,
		CredentialsID:   token,
		Version:         1,
	}
	if err := e.putCredentials(ctx, tenant, c); err != nil {
		// The same token given to this device meanwhile is no conflict: another
		// node's bootstrap found the device half-created by this one and
		// completed it (ensureDevice).
		if errors.Is(err, errTokenTaken) {
			if cur, cerr := e.credentialsOf(ctx, deviceID); cerr == nil && cur.CredentialsID == token {
				return cur, nil
			}
		}
		return nil, err
	}
	return c, nil
}

// credentialsOf returns the credentials of a device; storage.ErrNotFound if it has none.
func (e *Engine) credentialsOf(ctx context.Context, deviceID uuid.UUID) (*DeviceCredentials, error) {
	return lookupRecord[DeviceCredentials](ctx, e, kindCredentials, credsDeviceKey(deviceID))
}

// GetDeviceCredentials returns the credentials of a device p can see.
func (e *Engine) GetDeviceCredentials(ctx context.Context, p *Principal, deviceID uuid.UUID) (*DeviceCredentials, error) {
	if _, err := e.GetDevice(ctx, p, deviceID); err != nil {
		return nil, orDeviceNotFound(err, deviceID) // checkDeviceId
	}
	c, err := e.credentialsOf(ctx, deviceID)
	if err != nil {
		return nil, notFound(err)
	}
	return c, nil
}

// SaveDeviceCredentials replaces the access token of a device of p's tenant (tenant
// admin only). The old token is refused from the moment this returns. A device
// that lost its credentials (an interrupted create) gets new ones.
func (e *Engine) SaveDeviceCredentials(ctx context.Context, p *Principal, in *DeviceCredentials) (*DeviceCredentials, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	if in.DeviceID.ID == uuid.Nil {
		return nil, errCredsNoDevice
	}
	// The device first, as ThingsBoard's controller (checkDeviceId) does before
	// the credentials are validated: an unknown one is 404.
	d, err := e.loadDevice(ctx, in.DeviceID.ID)
	if err != nil {
		return nil, orDeviceNotFound(err, in.DeviceID.ID)
	}
	if d.TenantID() != p.TenantID {
		return nil, ErrPermissionDenied
	}
	switch in.CredentialsType {
	case CredentialsAccessToken:
	case "":
		return nil, errCredsNoType
	default:
		return nil, Errorf(CodeBadRequestParams, "Unsupported device credentials type: %s", in.CredentialsType)
	}
	if err := checkAccessToken(in.CredentialsID); err != nil {
		return nil, err
	}
	old, prev, err := lookupLoad[DeviceCredentials](ctx, e, kindCredentials, credsDeviceKey(d.ID.ID))
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return nil, err
	}
	c := &DeviceCredentials{
		DeviceID:        d.ID,
		CredentialsType: CredentialsAccessToken,
		CredentialsID:   in.CredentialsID,
	}
	if old != nil {
		c.ID, c.CreatedTime, c.Version = old.ID, old.CreatedTime, old.Version+1
		// Over the version read: a device deleted meanwhile (its credentials go
		// first) gets none back, and of two changes at once one wins.
		if err := e.writeCredentials(ctx, d.TenantID(), c, &prev); err != nil {
			return nil, changedOrGone(err)
		}
	} else {
		c.ID, c.CreatedTime, c.Version = CredentialsID{ID: newID()}, e.now().UnixMilli(), 1
		if err := e.putCredentials(ctx, d.TenantID(), c); err != nil {
			return nil, err
		}
		// Nothing to compare with: look whether the device is still there.
		if err := e.checkCredentialsOwner(ctx, c); err != nil {
			return nil, err
		}
	}
	if old != nil && old.CredentialsID != c.CredentialsID {
		e.evictToken(old.CredentialsID)
		e.publishPush(ctx, deviceTopic(d.ID.ID), []byte(credentialsChanged))
	}
	return c, nil
}

// checkCredentialsOwner runs after credentials c were written with Put: if their
// device is gone by now, its deletion may have looked for credentials before
// they were there, so they are deleted here (ErrNotFound). Together with the
// second look removeDevice takes after deleting the device record, this leaves
// no credentials, and no token refused for good, without a device.
func (e *Engine) checkCredentialsOwner(ctx context.Context, c *DeviceCredentials) error {
	_, err := e.loadDevice(ctx, c.DeviceID.ID)
	if err == nil || !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	if err := e.deleteRecord(ctx, kindCredentials, c.ID.ID); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	e.evictToken(c.CredentialsID)
	return ErrNotFound
}
