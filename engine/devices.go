package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

var (
	errDeviceNameTaken   = &Error{Code: CodeBadRequestParams, Msg: "Device with such name already exists!"}
	errDeviceNameBlank   = &Error{Code: CodeBadRequestParams, Msg: "Device name should be specified!"}
	errDeviceBadProfile  = &Error{Code: CodeBadRequestParams, Msg: "Device is referencing non existing device profile!"}
	errDeviceBadCustomer = &Error{Code: CodeBadRequestParams, Msg: "Can't assign device to non-existent customer!"}
	errDeviceForeignCust = &Error{Code: CodeBadRequestParams, Msg: "Can't assign device to customer from different tenant!"}
	// ThingsBoard's EntityVersionMismatchException for a device.
	errDeviceVersion = versionConflict("Device")
)

func (e *Engine) loadDevice(ctx context.Context, id uuid.UUID) (*Device, error) {
	return getRecord[Device](ctx, e, kindDevice, id)
}

// SaveDevice creates a device (zero ID) or updates one of p's tenant; tenant admins
// only. The profile is deviceProfileId if given, else the profile named by type
// (created if the tenant has none of that name, as ThingsBoard does), else the
// tenant's default; type always becomes the profile's name. The name is unique per
// tenant. A new device gets accessToken, or 20 random alphanumerics when empty; on
// update accessToken is ignored (use SaveDeviceCredentials).
func (e *Engine) SaveDevice(ctx context.Context, p *Principal, d *Device, accessToken string) (*Device, error) {
	return e.SaveDeviceWithPolicy(ctx, p, d, accessToken, NameConflict{})
}

// NameConflict is ThingsBoard's nameConflictPolicy: what a save does with a
// name another device of the tenant has. The zero value is FAIL (a 400);
// Uniquify appends Separator ("_" when empty) and a suffix: 6 random
// alphanumerics, or with Incremental the least number from 1 that is free.
type NameConflict struct {
	Uniquify    bool
	Separator   string
	Incremental bool
}

// maxUniquifyTries bounds the renames of a save whose new name was taken by a
// concurrent save in the meantime.
const maxUniquifyTries = 5

// SaveDeviceWithPolicy is SaveDevice that resolves a name conflict as names says.
func (e *Engine) SaveDeviceWithPolicy(ctx context.Context, p *Principal, d *Device, accessToken string, names NameConflict) (*Device, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	in := d
	for try := 0; ; try++ {
		v, err := e.saveDevice(ctx, p.TenantID, in, accessToken)
		if err != errDeviceNameTaken || !names.Uniquify || try == maxUniquifyTries {
			return v, err
		}
		name, err := e.uniqueDeviceName(ctx, p.TenantID, d, names)
		if err != nil {
			return nil, err
		}
		renamed := *d
		renamed.Name = name
		in = &renamed
	}
}

// SaveDeviceWithCredentials saves a device and its access token in one call
// (ThingsBoard's POST /api/device-with-credentials): a new device is created
// with c's token; an existing one is updated, then given c's token.
func (e *Engine) SaveDeviceWithCredentials(ctx context.Context, p *Principal, d *Device, c *DeviceCredentials, names NameConflict) (*Device, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	switch {
	case d == nil:
		return nil, Errorf(CodeBadRequestParams, "Validation error: device must not be null")
	case c == nil:
		return nil, Errorf(CodeBadRequestParams, "Validation error: credentials must not be null")
	case c.CredentialsType == "":
		return nil, errCredsNoType
	case c.CredentialsType != CredentialsAccessToken:
		return nil, Errorf(CodeBadRequestParams, "Unsupported device credentials type: %s", c.CredentialsType)
	}
	if err := checkAccessToken(c.CredentialsID); err != nil {
		return nil, err
	}
	if d.ID.ID == uuid.Nil {
		return e.SaveDeviceWithPolicy(ctx, p, d, c.CredentialsID, names)
	}
	// ThingsBoard saves both in one transaction. Here the device goes first,
	// so a token another device holds is refused before it: the device is
	// not changed by a request that fails. (A token taken in between still
	// fails the second step after the first.) The device is checked first, so
	// that a token's existence is told only to its own tenant's admin.
	if old, err := e.loadDevice(ctx, d.ID.ID); err != nil {
		return nil, orDeviceNotFound(err, d.ID.ID)
	} else if old.TenantID() != p.TenantID {
		return nil, ErrPermissionDenied
	}
	if cur, err := lookupRecord[DeviceCredentials](ctx, e, kindCredentials, tokenKey(c.CredentialsID)); err == nil && cur.DeviceID.ID != d.ID.ID {
		return nil, errTokenTaken
	} else if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return nil, err
	}
	saved, err := e.SaveDeviceWithPolicy(ctx, p, d, "", names)
	if err != nil {
		return nil, err
	}
	creds := *c
	creds.DeviceID = saved.ID
	if _, err := e.SaveDeviceCredentials(ctx, p, &creds); err != nil {
		return nil, err
	}
	return saved, nil
}

// uniqueDeviceName is d's name with a suffix that no other device of tenant
// has, as ThingsBoard's AbstractEntityService.generateUniqueName makes it.
func (e *Engine) uniqueDeviceName(ctx context.Context, tenant uuid.UUID, d *Device, names NameConflict) (string, error) {
	all, err := listRecords[Device](ctx, e, kindDevice, tenant)
	if err != nil {
		return "", err
	}
	taken := make(map[string]bool, len(all))
	for _, o := range all {
		if o.ID.ID != d.ID.ID {
			taken[o.Name] = true
		}
	}
	return uniqueName(d.Name, taken, names), nil
}

// uniqueName is base with names' separator and a suffix, such that the name
// is not taken (generateUniqueName); customer titles use it too.
func uniqueName(base string, taken map[string]bool, names NameConflict) string {
	sep := names.Separator
	if sep == "" {
		sep = "_"
	}
	for i := 1; ; i++ {
		suffix := randomString(6)
		if names.Incremental {
			suffix = strconv.Itoa(i)
		}
		if name := base + sep + suffix; !taken[name] {
			return name
		}
	}
}

// saveDevice is SaveDevice for a tenant, without the caller check (bootstrap uses it).
func (e *Engine) saveDevice(ctx context.Context, tenant uuid.UUID, in *Device, accessToken string) (*Device, error) {
	if strings.TrimSpace(in.Name) == "" {
		return nil, errDeviceNameBlank
	}
	if err := checkLengths("name", in.Name, "type", in.Type, "label", in.Label); err != nil {
		return nil, err
	}
	if err := checkAdditionalInfo(in.AdditionalInfo); err != nil {
		return nil, err
	}
	if err := checkJSONSize("device data", in.DeviceData); err != nil {
		return nil, err
	}
	if in.ID.ID == uuid.Nil {
		return e.createDevice(ctx, tenant, in, accessToken)
	}
	// An update is written only over the version it was made from: one that
	// another write (an assignment, a claim) overtook is made again from the
	// new version, and one whose device was deleted meanwhile is 404, not a
	// device brought back without its credentials.
	for range maxReplaceTries {
		old, prev, err := loadRecord[Device](ctx, e, kindDevice, in.ID.ID)
		if err != nil {
			return nil, orDeviceNotFound(err, in.ID.ID) // checkEntity's checkDeviceId
		}
		if old.TenantID() != tenant {
			return nil, ErrPermissionDenied
		}
		// A client's version (ThingsBoard's optimistic lock) must be the
		// stored one; none (0, as null in ThingsBoard) overwrites.
		if err := staleVersion("Device", in.Version, old.Version); err != nil {
			return nil, err
		}
		d, err := e.deviceFrom(ctx, tenant, in, old)
		if err != nil {
			return nil, err
		}
		// The stored id, not the client's: its entityType may be anything.
		d.ID, d.CreatedTime, d.Version = old.ID, old.CreatedTime, old.Version+1
		err = e.replaceRecord(ctx, kindDevice, d.ID.ID, tenant, prev, d, deviceNameKey(tenant, d.Name))
		switch {
		case errors.Is(err, storage.ErrChanged) && in.Version != 0:
			return nil, errDeviceVersion // the version the client named is gone
		case errors.Is(err, storage.ErrChanged):
			continue
		case errors.Is(err, storage.ErrConflict):
			return nil, errDeviceNameTaken
		case err != nil:
			return nil, orDeviceNotFound(err, in.ID.ID) // deleted meanwhile
		}
		if d.DeviceProfileID.ID != old.DeviceProfileID.ID {
			if err := e.checkDeviceProfileKept(ctx, d, old); err != nil {
				return nil, err
			}
		}
		if err := e.checkDeviceOtaKept(ctx, d, old); err != nil {
			return nil, err
		}
		if err := e.evictDevice(ctx, d.ID.ID); err != nil {
			return nil, err
		}
		return d, e.otaDeviceSaved(ctx, old, d) // OTA state follows a changed firmwareId/softwareId or profile
	}
	return nil, errChangedMeanwhile
}

// createDevice creates a device of tenant from in, with accessToken or a random one.
func (e *Engine) createDevice(ctx context.Context, tenant uuid.UUID, in *Device, accessToken string) (*Device, error) {
	if accessToken == "" {
		accessToken = randomString(20)
	} else if err := checkAccessToken(accessToken); err != nil {
		return nil, err
	}
	// maxDevices of the tenant's profile, before anything is written (also a
	// device profile named by type).
	if err := e.checkEntityLimit(ctx, tenant, deviceLimit); err != nil {
		return nil, err
	}
	d, err := e.deviceFrom(ctx, tenant, in, nil)
	if err != nil {
		return nil, err
	}
	d.ID = newEntityID(EntityDevice, newID())
	d.CreatedTime, d.Version = e.now().UnixMilli(), 1
	// Refuse a taken token before anything is written; the put below still
	// catches a race.
	if _, err := lookupRecord[DeviceCredentials](ctx, e, kindCredentials, tokenKey(accessToken)); err == nil {
		return nil, errTokenTaken
	} else if !errors.Is(err, storage.ErrNotFound) {
		return nil, err
	}
	err = e.putRecord(ctx, kindDevice, d.ID.ID, tenant, d, deviceNameKey(tenant, d.Name))
	if errors.Is(err, storage.ErrConflict) {
		return nil, errDeviceNameTaken
	}
	if err != nil {
		return nil, err
	}
	if err := e.checkDeviceProfileKept(ctx, d, nil); err != nil {
		return nil, err
	}
	if err := e.checkDeviceOtaKept(ctx, d, nil); err != nil {
		return nil, err
	}
	// The device is written first so that a crash leaves a device without a token
	// (repaired by SaveDeviceCredentials), never a token without a device.
	c, err := e.createCredentials(ctx, tenant, d.ID.ID, accessToken)
	if err != nil {
		if derr := e.deleteRecord(ctx, kindDevice, d.ID.ID); derr != nil {
			return nil, errors.Join(err, derr)
		}
		return nil, err
	}
	// A deletion of the new device (its id is listed already) may have run
	// between the two writes and found no credentials to delete.
	if err := e.checkCredentialsOwner(ctx, c); err != nil {
		return nil, err
	}
	return d, e.otaDeviceSaved(ctx, nil, d)
}

// deviceFrom is the device in asks for as tenant's, over old (nil for a new
// device): customer, profile and type, OTA packages and device data checked and
// filled in. ID, CreatedTime and Version are the caller's.
func (e *Engine) deviceFrom(ctx context.Context, tenant uuid.UUID, in *Device, old *Device) (*Device, error) {
	d := *in
	d.Tenant = newEntityID(EntityTenant, tenant)
	if err := e.checkDeviceCustomer(ctx, tenant, &d); err != nil {
		return nil, err
	}
	profileID := in.DeviceProfileID.ID
	if old != nil && profileID == uuid.Nil && (in.Type == "" || in.Type == old.Type) {
		profileID = old.DeviceProfileID.ID // an update that names no other profile keeps its own
	}
	prof, err := e.deviceProfileFor(ctx, tenant, profileID, in.Type)
	if err != nil {
		return nil, err
	}
	d.DeviceProfileID, d.Type = prof.ID, prof.Name
	var oldFirmware, oldSoftware *EntityID
	if old != nil {
		oldFirmware, oldSoftware = old.FirmwareID, old.SoftwareID
	}
	if err := e.checkOtaAssignment(ctx, tenant, prof.ID.ID, &d.FirmwareID, &d.SoftwareID, oldFirmware, oldSoftware); err != nil {
		return nil, err
	}
	if len(d.DeviceData) == 0 || string(d.DeviceData) == "null" {
		d.DeviceData = defaultDeviceData
	}
	return &d, nil
}

// checkDeviceProfileKept runs after device d was written with a profile its
// previous version old (nil: a new device) did not have. If a deletion of that
// profile has begun meanwhile (see DeleteDeviceProfile), the write is taken
// back and the save refused as if the profile were gone.
func (e *Engine) checkDeviceProfileKept(ctx context.Context, d, old *Device) error {
	ok, err := e.usableProfile(ctx, d.DeviceProfileID.ID)
	if err != nil || ok {
		return err
	}
	return e.undoDeviceSave(ctx, d, old, errDeviceBadProfile, func(cur *Device) bool {
		return cur.DeviceProfileID.ID == d.DeviceProfileID.ID
	})
}

// checkDeviceOtaKept runs after device d was written over old (nil: a new
// device). If a deletion of a package d has and old had not has begun
// meanwhile (see DeleteOtaPackage), the write is taken back and the save
// refused as if the package were gone.
func (e *Engine) checkDeviceOtaKept(ctx context.Context, d, old *Device) error {
	var oldFirmware, oldSoftware *EntityID
	if old != nil {
		oldFirmware, oldSoftware = old.FirmwareID, old.SoftwareID
	}
	typ, err := e.lostOta(ctx, d.FirmwareID, d.SoftwareID, oldFirmware, oldSoftware)
	if err != nil || typ == "" {
		return err
	}
	lost := otaIDOf(typ, d.FirmwareID, d.SoftwareID)
	return e.undoDeviceSave(ctx, d, old, errOtaMissing(typ), func(cur *Device) bool {
		return otaIDOf(typ, cur.FirmwareID, cur.SoftwareID) == lost
	})
}

// undoDeviceSave takes back the write of device d over old (nil: a new
// device) after a check that followed it failed, and returns fail: a new
// device is deleted (it has no credentials yet); an updated one gets old's
// profile and packages back (they were checked together), over whatever
// version is stored now, for another write may have come after ours. When
// that write already moved the device off what failed (holds is false), the
// device is left as it is.
func (e *Engine) undoDeviceSave(ctx context.Context, d, old *Device, fail error, holds func(cur *Device) bool) error {
	if old == nil {
		if err := e.deleteRecord(ctx, kindDevice, d.ID.ID); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		return fail
	}
	for range maxReplaceTries {
		cur, prev, err := loadRecord[Device](ctx, e, kindDevice, d.ID.ID)
		if errors.Is(err, storage.ErrNotFound) {
			return fail
		}
		if err != nil {
			return err
		}
		if !holds(cur) {
			return fail // moved off it already
		}
		cur.DeviceProfileID, cur.Type = old.DeviceProfileID, old.Type
		cur.FirmwareID, cur.SoftwareID = old.FirmwareID, old.SoftwareID
		cur.Version++
		err = e.replaceRecord(ctx, kindDevice, cur.ID.ID, cur.TenantID(), prev, cur, deviceNameKey(cur.TenantID(), cur.Name))
		switch {
		case errors.Is(err, storage.ErrChanged):
			continue
		case errors.Is(err, storage.ErrNotFound):
			return fail
		case err != nil:
			return err
		}
		if err := e.evictDevice(ctx, cur.ID.ID); err != nil {
			return err
		}
		return fail
	}
	return errChangedMeanwhile
}

// checkDeviceCustomer normalises the customer of d and checks it is one of tenant's.
func (e *Engine) checkDeviceCustomer(ctx context.Context, tenant uuid.UUID, d *Device) error {
	if isNull(d.CustomerID.ID) {
		d.CustomerID = newEntityID(EntityCustomer, NullUUID)
		return nil
	}
	c, err := getRecord[Customer](ctx, e, kindCustomer, d.CustomerID.ID)
	if err != nil {
		return ifNotFound(err, errDeviceBadCustomer)
	}
	if c.TenantID.ID != tenant {
		return errDeviceForeignCust
	}
	d.CustomerID = c.ID
	return nil
}

// deviceProfileFor picks the profile of a saved device (see SaveDevice).
func (e *Engine) deviceProfileFor(ctx context.Context, tenant, profileID uuid.UUID, typeName string) (*DeviceProfile, error) {
	if profileID != uuid.Nil {
		rec, _, err := e.loadProfile(ctx, profileID)
		if err != nil {
			return nil, ifNotFound(err, errDeviceBadProfile)
		}
		if rec.TenantID.ID != tenant || rec.marked(e.now()) {
			return nil, errDeviceBadProfile
		}
		return &rec.DeviceProfile, nil
	}
	if typeName != "" {
		return e.profileByName(ctx, tenant, typeName)
	}
	return e.defaultProfile(ctx, tenant)
}

// GetDevice returns a device p can see: a tenant admin its tenant's, a customer
// user its customer's. Another tenant's device is 403, an unknown id 404.
func (e *Engine) GetDevice(ctx context.Context, p *Principal, id uuid.UUID) (*Device, error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	d, err := e.loadDevice(ctx, id)
	if err != nil {
		return nil, notFound(err)
	}
	if !e.canSeeDevice(p, d) {
		return nil, ErrPermissionDenied
	}
	return d, nil
}

// GetDeviceByID is GetDevice for GET /api/device/{deviceId}: an unknown id is
// "Device with id [<id>] is not found", as ThingsBoard's checkDeviceId answers
// (GetDevice's own ErrNotFound is worded by each caller: the RPC routes say
// it as ThingsBoard's AccessValidator does).
func (e *Engine) GetDeviceByID(ctx context.Context, p *Principal, id uuid.UUID) (*Device, error) {
	d, err := e.GetDevice(ctx, p, id)
	if err != nil {
		return nil, orDeviceNotFound(err, id)
	}
	return d, nil
}

// DeleteDevice removes a device of p's tenant with its credentials, time series and
// attributes (tenant admins only). The token is refused from the moment its
// credentials are gone; the device record goes last so a failed delete can be
// retried.
func (e *Engine) DeleteDevice(ctx context.Context, p *Principal, id uuid.UUID) error {
	if err := requireRole(p, TenantAdmin); err != nil {
		return err
	}
	d, err := e.loadDevice(ctx, id)
	if err != nil {
		return orDeviceNotFound(err, id)
	}
	if d.TenantID() != p.TenantID {
		return ErrPermissionDenied
	}
	return e.removeDevice(ctx, id)
}

// removeDevice deletes a device with its credentials (evicting its token), time
// series and attributes, and ends its open long polls on every node.
func (e *Engine) removeDevice(ctx context.Context, id uuid.UUID) error {
	if err := e.dropCredentials(ctx, id); err != nil {
		return err
	}
	if err := e.removeEntityData(ctx, id); err != nil {
		return err
	}
	if err := e.removeDeviceRPCs(ctx, id); err != nil {
		return err
	}
	if err := e.dropClaim(ctx, id); err != nil {
		return err
	}
	if err := e.dropProvisionGuard(ctx, id); err != nil {
		return err
	}
	if err := e.deleteRecord(ctx, kindDevice, id); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	e.publishPush(ctx, deviceTopic(id), []byte(deviceDeleted)) // ends its open polls with 403
	e.sweepLater(sweep{id: id})
	// A token change that ran between the first dropCredentials and the
	// device's deletion found the device still there and wrote new
	// credentials: delete them too. One that writes after this point finds
	// the device gone and deletes its own (checkCredentialsOwner), so no
	// interleaving leaves credentials without a device.
	return e.dropCredentials(ctx, id)
}

// dropCredentials deletes whatever credentials record holds the device's id,
// evicting its token; none is no error.
func (e *Engine) dropCredentials(ctx context.Context, id uuid.UUID) error {
	creds, err := e.credentialsOf(ctx, id)
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := e.deleteRecord(ctx, kindCredentials, creds.ID.ID); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	e.evictToken(creds.CredentialsID)
	return nil
}

// removeEntityData deletes every time series and attribute of an entity.
func (e *Engine) removeEntityData(ctx context.Context, id uuid.UUID) error {
	if err := e.store.DeleteEntitySeries(ctx, id); err != nil {
		return fmt.Errorf("cannot delete time series of %s: %w", id, err)
	}
	if err := e.store.DeleteEntityAttributes(ctx, id); err != nil {
		return fmt.Errorf("cannot delete attributes of %s: %w", id, err)
	}
	// Its ingest statistics too. A node may still flush a last second of counts
	// for it afterwards: a few orphaned counters, never read (ids are not reused).
	if c, ok := e.store.(storage.Counters); ok {
		if err := c.DeleteCounters(ctx, id); err != nil {
			return fmt.Errorf("cannot delete ingest statistics of %s: %w", id, err)
		}
	}
	return nil
}

var errDeviceNotAssigned = &Error{Code: CodeBadRequestParams, Msg: "Device isn't assigned to any customer!"}

// AssignDevice assigns a device of p's tenant to one of its customers (tenant
// admins only), so that customer's users see it.
func (e *Engine) AssignDevice(ctx context.Context, p *Principal, customerID, deviceID uuid.UUID) (*Device, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	c, err := e.GetCustomer(ctx, p, customerID)
	if err != nil {
		return nil, err
	}
	return e.setDeviceCustomer(ctx, p, deviceID, c.ID)
}

// UnassignDevice makes a device of p's tenant unassigned again (tenant admins only).
func (e *Engine) UnassignDevice(ctx context.Context, p *Principal, deviceID uuid.UUID) (*Device, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	return e.setDeviceCustomer(ctx, p, deviceID, newEntityID(EntityCustomer, NullUUID))
}

func (e *Engine) setDeviceCustomer(ctx context.Context, p *Principal, deviceID uuid.UUID, customer EntityID) (*Device, error) {
	d, err := e.loadDevice(ctx, deviceID)
	if err != nil {
		return nil, orDeviceNotFound(err, deviceID)
	}
	if d.TenantID() != p.TenantID {
		return nil, ErrPermissionDenied
	}
	if isNull(customer.ID) && isNull(d.CustomerID.ID) {
		return nil, errDeviceNotAssigned
	}
	if !isNull(customer.ID) && d.CustomerID.ID == customer.ID {
		// Already there: returned as it is, its version kept, as
		// ThingsBoard's DeviceServiceImpl.assignDeviceToCustomer does.
		return d, nil
	}
	d, err = e.putDeviceCustomer(ctx, deviceID, customer, nil)
	if err != nil {
		return nil, orDeviceNotFound(err, deviceID) // deleted meanwhile
	}
	return d, nil
}

// errNoPublicCustomer answers POST /api/customer/public/device/{deviceId}:
// ThingsBoard's public customer (of public dashboards) has no counterpart.
var errNoPublicCustomer = &Error{Code: CodeBadRequestParams, Msg: "Public customers are not supported: Sluice has no public customer to assign a device to"}

// AssignDeviceToPublicCustomer is ThingsBoard's assignDeviceToPublicCustomer,
// which Sluice does not support: after the checks ThingsBoard makes first
// (tenant admins only, the device one of theirs) it is errNoPublicCustomer.
func (e *Engine) AssignDeviceToPublicCustomer(ctx context.Context, p *Principal, deviceID uuid.UUID) (*Device, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	if _, err := e.GetDeviceByID(ctx, p, deviceID); err != nil {
		return nil, err
	}
	return nil, errNoPublicCustomer
}

// putDeviceCustomer assigns the stored device to customer, over its latest
// version (read again when another write overtakes this one; a deleted device
// stays deleted: storage.ErrNotFound), and evicts its cached token. check, when
// not nil, vets that version first; its error is returned as it is.
func (e *Engine) putDeviceCustomer(ctx context.Context, id uuid.UUID, customer EntityID, check func(*Device) error) (*Device, error) {
	for range maxReplaceTries {
		d, prev, err := loadRecord[Device](ctx, e, kindDevice, id)
		if err != nil {
			return nil, err
		}
		if check != nil {
			// On the version about to be replaced: what the caller decided on
			// may have changed since it looked (a claim on another node).
			if err := check(d); err != nil {
				return nil, err
			}
		}
		d.CustomerID = customer
		d.Version++
		err = e.replaceRecord(ctx, kindDevice, id, d.TenantID(), prev, d, deviceNameKey(d.TenantID(), d.Name))
		if errors.Is(err, storage.ErrChanged) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := e.evictDevice(ctx, id); err != nil {
			return nil, err
		}
		return d, e.checkCustomerKept(ctx, id, customer)
	}
	return nil, errChangedMeanwhile
}

// errNotAssignedThere: the device is no longer assigned to the customer an
// undo meant to take it from.
var errNotAssignedThere = errors.New("device not assigned to that customer")

// stillAssignedTo is a putDeviceCustomer check: the device is still assigned
// to customer.
func stillAssignedTo(customer uuid.UUID) func(*Device) error {
	return func(cur *Device) error {
		if cur.CustomerID.ID != customer {
			return errNotAssignedThere
		}
		return nil
	}
}

// checkCustomerKept runs after device id was assigned to customer: if the
// customer is gone by now, its deletion may have looked for its devices
// before this write, so the assignment is taken back (storage.ErrNotFound).
func (e *Engine) checkCustomerKept(ctx context.Context, id uuid.UUID, customer EntityID) error {
	if isNull(customer.ID) {
		return nil
	}
	_, err := getRecord[Customer](ctx, e, kindCustomer, customer.ID)
	if !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	_, uerr := e.putDeviceCustomer(ctx, id, newEntityID(EntityCustomer, NullUUID), stillAssignedTo(customer.ID))
	if uerr != nil && !errors.Is(uerr, storage.ErrNotFound) && !errors.Is(uerr, errNotAssignedThere) {
		return errors.Join(err, uerr)
	}
	return err
}

// ListCustomerDevices returns a page of the devices assigned to a customer: to a
// tenant admin for its tenant's customers, to a customer user for its own
// customer; optionally only those of one type.
func (e *Engine) ListCustomerDevices(ctx context.Context, p *Principal, customerID uuid.UUID, pl PageLink, deviceType string) (PageData[*Device], error) {
	c, err := e.GetCustomer(ctx, p, customerID)
	if err != nil {
		return PageData[*Device]{}, err
	}
	all, err := listRecords[Device](ctx, e, kindDevice, c.TenantID.ID)
	if err != nil {
		return PageData[*Device]{}, err
	}
	byType := strings.TrimSpace(deviceType) != "" // a blank type is no filter, as ThingsBoard's
	all = slices.DeleteFunc(all, func(d *Device) bool {
		return d.CustomerID.ID != customerID || (byType && d.Type != deviceType)
	})
	return makePage(all, pl, devicePages)
}

// ListTenantDevices returns a page of the devices of p's tenant (tenant admins
// only), optionally only those of one type (profile name).
func (e *Engine) ListTenantDevices(ctx context.Context, p *Principal, pl PageLink, deviceType string) (PageData[*Device], error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return PageData[*Device]{}, err
	}
	all, err := listRecords[Device](ctx, e, kindDevice, p.TenantID)
	if err != nil {
		return PageData[*Device]{}, err
	}
	if strings.TrimSpace(deviceType) != "" { // a blank type is no filter, as ThingsBoard's
		filtered := all[:0]
		for _, d := range all {
			if d.Type == deviceType {
				filtered = append(filtered, d)
			}
		}
		all = filtered
	}
	spec := devicePages
	if pl.SortProperty == "customerTitle" {
		// ThingsBoard sorts a tenant's devices by their customer's title too;
		// only this list pays for reading the customers.
		customers, err := listRecords[Customer](ctx, e, kindCustomer, p.TenantID)
		if err != nil {
			return PageData[*Device]{}, err
		}
		titles := make(map[uuid.UUID]string, len(customers))
		for _, c := range customers {
			titles[c.ID.ID] = c.Title
		}
		spec.keys = maps.Clone(spec.keys)
		spec.keys["customerTitle"] = func(d *Device) sortKey {
			if t, ok := titles[d.CustomerID.ID]; ok {
				return strKey(t)
			}
			return nullKey // unassigned
		}
	}
	return makePage(all, pl, spec)
}

// TenantDeviceByName returns the device of p's tenant with that name (tenant admins only).
func (e *Engine) TenantDeviceByName(ctx context.Context, p *Principal, name string) (*Device, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	d, err := lookupRecord[Device](ctx, e, kindDevice, deviceNameKey(p.TenantID, name))
	if err != nil {
		return nil, notFound(err)
	}
	return d, nil
}
