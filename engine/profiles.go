package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// DefaultProfileName is the name of the profile every tenant starts with.
const DefaultProfileName = "default"

var (
	errProfileNameTaken  = &Error{Code: CodeBadRequestParams, Msg: "Device profile with such name already exists!"}
	errProfileKeyTaken   = &Error{Code: CodeBadRequestParams, Msg: "Device profile with such provision device key already exists!"}
	errProfileNameBlank  = &Error{Code: CodeBadRequestParams, Msg: "Device profile name should be specified!"}
	errProfileDelDefault = &Error{Code: CodeBadRequestParams, Msg: "Deletion of Default Device Profile is prohibited!"}
	errProfileInUse      = &Error{Code: CodeBadRequestParams, Msg: "The device profile referenced by the devices cannot be deleted!"}
)

// ThingsBoard's DeviceProfileDataValidator messages.
var (
	errProfileOtherDefault = &Error{Code: CodeBadRequestParams, Msg: "Another default device profile is present in scope of current tenant!"}
	errProfileTypeUsed     = &Error{Code: CodeBadRequestParams, Msg: "Can't change device profile type because devices referenced it!"}
	errProfileTransUsed    = &Error{Code: CodeBadRequestParams, Msg: "Can't change device profile transport type because devices referenced it!"}
)

// newProfile returns a DEFAULT profile with ThingsBoard's default profile data.
func (e *Engine) newProfile(tenant uuid.UUID, name string, isDefault bool) *DeviceProfile {
	return &DeviceProfile{
		ID:            newEntityID(EntityDeviceProfile, newID()),
		CreatedTime:   e.now().UnixMilli(),
		TenantID:      newEntityID(EntityTenant, tenant),
		Name:          name,
		Type:          "DEFAULT",
		TransportType: "DEFAULT",
		ProvisionType: ProvisionDisabled,
		ProfileData: DeviceProfileData{
			Configuration:          defaultTypeJSON,
			TransportConfiguration: defaultTypeJSON,
			ProvisionConfiguration: ProvisionConfiguration{Type: ProvisionDisabled},
		},
		Default: isDefault,
		Version: 1,
	}
}

// profileRecord is a profile as stored. Deleting marks a profile whose deletion
// is under way: device saves refuse it (see DeleteDeviceProfile, deletionMarks). Code that
// reads a DeviceProfile does not see the field.
//
// Promoting marks a profile that SetDefaultDeviceProfile is making the default:
// between its taking the flag off the old default and putting it on this one
// the tenant has none, and defaultProfile then finishes the change rather
// than creating another default.
type profileRecord struct {
	DeviceProfile
	deletionMarks
	Promoting bool `json:"promoting,omitempty"`
}

// loadProfile reads a stored profile with its data, for writeProfile.
func (e *Engine) loadProfile(ctx context.Context, id uuid.UUID) (*profileRecord, []byte, error) {
	return loadRecord[profileRecord](ctx, e, kindProfile, id)
}

// putProfile stores a profile with its unique name, default marker and provision key.
func (e *Engine) putProfile(ctx context.Context, dp *DeviceProfile) error {
	return e.writeProfile(ctx, &profileRecord{DeviceProfile: *dp}, nil)
}

// writeProfile stores r: with Put, or over the version read as *prev
// (storage.ErrChanged, storage.ErrNotFound as replaceRecord).
func (e *Engine) writeProfile(ctx context.Context, r *profileRecord, prev *[]byte) error {
	if r.Default {
		r.Promoting = false // promoted, however it came about (an update with default:true)
	}
	dp := &r.DeviceProfile
	tenant := dp.TenantID.ID
	unique := []string{profileNameKey(tenant, dp.Name)}
	if dp.Default {
		unique = append(unique, defaultProfileKey(tenant))
	}
	if dp.ProvisionDeviceKey != nil && *dp.ProvisionDeviceKey != "" {
		unique = append(unique, provisionKeyKey(*dp.ProvisionDeviceKey))
	}
	err := e.writeRecord(ctx, kindProfile, dp.ID.ID, tenant, prev, r, unique)
	if errors.Is(err, storage.ErrConflict) {
		return e.profileConflict(ctx, dp)
	}
	return err
}

// profileConflict tells which unique value of dp was taken.
func (e *Engine) profileConflict(ctx context.Context, dp *DeviceProfile) error {
	if dp.Default {
		if other, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, defaultProfileKey(dp.TenantID.ID)); err == nil && other.ID != dp.ID {
			return errProfileOtherDefault
		}
	}
	if other, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, profileNameKey(dp.TenantID.ID, dp.Name)); err == nil && other.ID != dp.ID {
		return errProfileNameTaken
	}
	if dp.ProvisionDeviceKey != nil {
		if other, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, provisionKeyKey(*dp.ProvisionDeviceKey)); err == nil && other.ID != dp.ID {
			return errProfileKeyTaken
		}
	}
	return fmtConflict(kindProfile, dp.ID.ID)
}

// defaultProfile returns the tenant's default profile, creating it if missing: a
// tenant whose creation was interrupted gets it here.
func (e *Engine) defaultProfile(ctx context.Context, tenant uuid.UUID) (*DeviceProfile, error) {
	for range 3 {
		dp, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, defaultProfileKey(tenant))
		if err == nil || !errors.Is(err, storage.ErrNotFound) {
			return dp, err
		}
		// A change of default half-way (see profileRecord): finish it.
		if dp, err := e.finishPromotion(ctx, tenant); err != nil || dp != nil {
			if errors.Is(err, storage.ErrChanged) || errors.Is(err, errProfileOtherDefault) {
				continue // another caller finished it or changed it: look again
			}
			return dp, err
		}
		// A profile named "default" that is not the default keeps its name; the
		// default then gets another one.
		name := DefaultProfileName
		if _, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, profileNameKey(tenant, name)); err == nil {
			name = DefaultProfileName + "-" + randomString(6)
		}
		dp = e.newProfile(tenant, name, true)
		err = e.putProfile(ctx, dp)
		if err == nil {
			return dp, nil
		}
		if !errors.Is(err, storage.ErrConflict) && !errors.Is(err, errProfileNameTaken) && !errors.Is(err, errProfileOtherDefault) {
			return nil, err
		}
		// Another caller created it at the same time: read theirs.
	}
	return nil, fmtConflict(kindProfile, tenant)
}

// finishPromotion makes a profile of tenant marked Promoting the default; nil
// when there is none.
func (e *Engine) finishPromotion(ctx context.Context, tenant uuid.UUID) (*DeviceProfile, error) {
	all, err := listRecords[profileRecord](ctx, e, kindProfile, tenant)
	if err != nil {
		return nil, err
	}
	for _, r := range all {
		if r.Promoting {
			return e.promoteProfile(ctx, r.ID.ID)
		}
	}
	return nil, nil
}

// promoteProfile makes a profile marked Promoting the default, over the
// version read: storage.ErrChanged when it changed meanwhile, errProfileOtherDefault
// when another default appeared.
func (e *Engine) promoteProfile(ctx context.Context, id uuid.UUID) (*DeviceProfile, error) {
	rec, prev, err := e.loadProfile(ctx, id)
	if err != nil {
		return nil, err
	}
	if !rec.Promoting {
		return nil, fmt.Errorf("profile %s: %w", id, storage.ErrChanged)
	}
	rec.Default, rec.Promoting = true, false
	rec.Version++
	if err := e.writeProfile(ctx, rec, &prev); err != nil {
		return nil, err
	}
	return &rec.DeviceProfile, nil
}

// SetDefaultDeviceProfile makes a profile of p's tenant its default (tenant
// admins only), as ThingsBoard's POST /api/deviceProfile/{id}/default: devices
// saved without a profile or type get it from now on. The default is a unique
// value of the profile records, so the change is three writes: the profile is
// marked Promoting, the old default loses the flag, the profile gets it; a
// caller that finds no default in between finishes the change (defaultProfile).
func (e *Engine) SetDefaultDeviceProfile(ctx context.Context, p *Principal, id uuid.UUID) (dp *DeviceProfile, err error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			e.dropProfilePromotingMark(ctx, p.TenantID, id) // else the profile would read as becoming the default for good
		}
	}()
	for range maxReplaceTries {
		rec, prev, err := e.loadProfile(ctx, id)
		if err != nil {
			return nil, notFound(err)
		}
		if rec.TenantID.ID != p.TenantID {
			return nil, ErrPermissionDenied
		}
		switch {
		case rec.Default:
			return &rec.DeviceProfile, nil
		case rec.marked(e.now()):
			return nil, errChangedMeanwhile // a deletion is under way: it is 404 soon, or usable again
		case !rec.Promoting:
			rec.Promoting = true
			if err := e.writeProfile(ctx, rec, &prev); errors.Is(err, storage.ErrChanged) {
				continue
			} else if err != nil {
				return nil, notFound(err)
			}
		}
		if err := e.demoteDefault(ctx, p.TenantID, id); err != nil {
			return nil, err
		}
		dp, err := e.promoteProfile(ctx, id)
		switch {
		case errors.Is(err, storage.ErrChanged), errors.Is(err, errProfileOtherDefault):
			continue // an update, or another default meanwhile: again
		case err != nil:
			return nil, notFound(err)
		}
		return dp, nil
	}
	return nil, errChangedMeanwhile
}

// dropProfilePromotingMark takes the Promoting mark off a profile of tenant
// a failed change of default left it on, over the version read, while
// another profile is the default; a later change sets it again. With no
// default (the old one was demoted) the mark stays: defaultProfile finishes
// the change with it.
func (e *Engine) dropProfilePromotingMark(ctx context.Context, tenant, id uuid.UUID) {
	if _, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, defaultProfileKey(tenant)); err != nil {
		return
	}
	rec, prev, err := e.loadProfile(ctx, id)
	if err != nil || !rec.Promoting || rec.TenantID.ID != tenant {
		return
	}
	rec.Promoting = false
	if err := e.writeProfile(ctx, rec, &prev); err != nil && !errors.Is(err, storage.ErrChanged) && !errors.Is(err, storage.ErrNotFound) {
		e.cfg.Logger.Warn("cannot clear the mark of a failed change of the default device profile", "deviceProfile", id, "err", err)
	}
}

// demoteDefault takes the default flag off the tenant's default profile unless
// it is keep.
func (e *Engine) demoteDefault(ctx context.Context, tenant, keep uuid.UUID) error {
	for range maxReplaceTries {
		cur, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, defaultProfileKey(tenant))
		if errors.Is(err, storage.ErrNotFound) || (err == nil && cur.ID.ID == keep) {
			return nil
		}
		if err != nil {
			return err
		}
		rec, prev, err := e.loadProfile(ctx, cur.ID.ID)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if !rec.Default {
			continue
		}
		rec.Default = false
		rec.Version++
		err = e.writeProfile(ctx, rec, &prev)
		if errors.Is(err, storage.ErrChanged) || errors.Is(err, storage.ErrNotFound) {
			continue
		}
		return err
	}
	return errChangedMeanwhile
}

// profileByName returns the tenant's profile of that name, creating a DEFAULT one if
// there is none (ThingsBoard's findOrCreateDeviceProfile).
func (e *Engine) profileByName(ctx context.Context, tenant uuid.UUID, name string) (*DeviceProfile, error) {
	for range 2 {
		dp, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, profileNameKey(tenant, name))
		if err == nil || !errors.Is(err, storage.ErrNotFound) {
			return dp, err
		}
		// A device's blank type would create a profile with a blank name;
		// ThingsBoard's profile validation refuses it with this message.
		if strings.TrimSpace(name) == "" {
			return nil, errProfileNameBlank
		}
		dp = e.newProfile(tenant, name, false)
		err = e.putProfile(ctx, dp)
		if err == nil {
			return dp, nil
		}
		if !errors.Is(err, errProfileNameTaken) {
			return nil, err
		}
	}
	return nil, errProfileNameTaken
}

// GetDefaultProfileInfo returns the short form of the default profile of p's
// tenant; tenant admins and customer users, as ThingsBoard.
func (e *Engine) GetDefaultProfileInfo(ctx context.Context, p *Principal) (*DeviceProfileInfo, error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	dp, err := e.defaultProfile(ctx, p.TenantID)
	if err != nil {
		return nil, err
	}
	info := dp.Info()
	return &info, nil
}

// GetDeviceProfileInfo returns the short form of a profile of p's tenant;
// tenant admins and customer users, as ThingsBoard.
func (e *Engine) GetDeviceProfileInfo(ctx context.Context, p *Principal, id uuid.UUID) (*DeviceProfileInfo, error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	dp, err := e.tenantProfile(ctx, p, id)
	if err != nil {
		return nil, err
	}
	info := dp.Info()
	return &info, nil
}

// ListDeviceProfileInfos returns a page of the short forms of the profiles of
// p's tenant, optionally of one transport type; searched and sorted as
// ListDeviceProfiles. Tenant admins and customer users, as ThingsBoard.
func (e *Engine) ListDeviceProfileInfos(ctx context.Context, p *Principal, pl PageLink, transportType string) (PageData[*DeviceProfileInfo], error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return PageData[*DeviceProfileInfo]{}, err
	}
	all, err := listRecords[DeviceProfile](ctx, e, kindProfile, p.TenantID)
	if err != nil {
		return PageData[*DeviceProfileInfo]{}, err
	}
	if transportType != "" {
		all = slices.DeleteFunc(all, func(dp *DeviceProfile) bool { return dp.TransportType != transportType })
	}
	page, err := makePage(all, pl, profilePages)
	if err != nil {
		return PageData[*DeviceProfileInfo]{}, err
	}
	out := PageData[*DeviceProfileInfo]{Data: make([]*DeviceProfileInfo, 0, len(page.Data)),
		TotalPages: page.TotalPages, TotalElements: page.TotalElements, HasNext: page.HasNext}
	for _, dp := range page.Data {
		info := dp.Info()
		out.Data = append(out.Data, &info)
	}
	return out, nil
}

// SaveDeviceProfile creates or updates a profile of p's tenant (tenant admins only).
// A tenant's first profile is its default; SetDefaultDeviceProfile moves the flag.
// Renaming a profile renames the type of its devices.
func (e *Engine) SaveDeviceProfile(ctx context.Context, p *Principal, in *DeviceProfile) (*DeviceProfile, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	if strings.TrimSpace(in.Name) == "" {
		return nil, errProfileNameBlank
	}
	if err := checkLengths("name", in.Name); err != nil {
		return nil, err
	}
	switch in.ProvisionType {
	case "", ProvisionDisabled, ProvisionAllowCreate, ProvisionCheckPre, ProvisionX509Chain:
	default:
		return nil, Errorf(CodeBadRequestParams, "Invalid provision type %q: expected one of %s, %s, %s, %s",
			in.ProvisionType, ProvisionDisabled, ProvisionAllowCreate, ProvisionCheckPre, ProvisionX509Chain)
	}
	switch in.TransportType { // ThingsBoard's DeviceTransportType
	case "", "DEFAULT", "MQTT", "COAP", "LWM2M", "SNMP":
	default:
		return nil, Errorf(CodeBadRequestParams, "Invalid transport type %q: expected one of DEFAULT, MQTT, COAP, LWM2M, SNMP", in.TransportType)
	}
	if in.ID.ID != uuid.Nil {
		return e.updateProfile(ctx, p, in)
	}
	dp := *in
	dp.TenantID = newEntityID(EntityTenant, p.TenantID)
	dp.ID = newEntityID(EntityDeviceProfile, newID())
	dp.CreatedTime, dp.Version = e.now().UnixMilli(), 1
	_, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, defaultProfileKey(p.TenantID))
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return nil, err
	}
	// The first profile is the default. Asking for default while another is
	// is 400 as ThingsBoard; the unique default value catches a race.
	dp.Default = in.Default || err != nil
	fillProfileDefaults(&dp)
	if _, err := e.checkProfileOta(ctx, &dp); err != nil {
		return nil, err
	}
	if err := e.putProfile(ctx, &dp); err != nil {
		return nil, err
	}
	if err := e.checkProfileOtaKept(ctx, p, &dp, nil); err != nil {
		return nil, err
	}
	return &dp, nil
}

// errProfileVersion is ThingsBoard's EntityVersionMismatchException for a profile.
var errProfileVersion = versionConflict("Device profile")

// updateProfile is SaveDeviceProfile of an existing profile. It is written only
// over the version it was made from, as saveDevice: one overtaken by another
// update is made again over it (not overwriting it), one whose profile was
// deleted meanwhile is 404 (not the profile brought back). A profile whose
// deletion is under way keeps its mark: the update is then as if made just
// before the deletion.
func (e *Engine) updateProfile(ctx context.Context, p *Principal, in *DeviceProfile) (*DeviceProfile, error) {
	for range maxReplaceTries {
		rec, prev, err := e.loadProfile(ctx, in.ID.ID)
		if err != nil {
			return nil, notFound(err)
		}
		old := rec.DeviceProfile
		if old.TenantID.ID != p.TenantID {
			return nil, ErrPermissionDenied
		}
		// A client's version (ThingsBoard's optimistic lock) must be the
		// stored one; none (0, as null in ThingsBoard) overwrites.
		if err := staleVersion("Device profile", in.Version, old.Version); err != nil {
			return nil, err
		}
		dp := *in
		dp.TenantID = old.TenantID
		// The default stays the default (POST /api/deviceProfile/{id}/default
		// moves it); asking for default while another is is 400 as ThingsBoard.
		dp.CreatedTime, dp.Version, dp.Default = old.CreatedTime, old.Version+1, old.Default || in.Default
		fillProfileDefaults(&dp)
		if err := e.checkOtaAssignment(ctx, dp.TenantID.ID, dp.ID.ID, &dp.FirmwareID, &dp.SoftwareID, old.FirmwareID, old.SoftwareID); err != nil {
			return nil, err
		}
		// Devices are made for their profile's type and transport (ThingsBoard's
		// DeviceProfileDataValidator.validateUpdate).
		if dp.Type != old.Type || dp.TransportType != old.TransportType {
			used, err := e.profileInUse(ctx, old.TenantID.ID, old.ID.ID)
			switch {
			case err != nil:
				return nil, err
			case used && dp.Type != old.Type:
				return nil, errProfileTypeUsed
			case used:
				return nil, errProfileTransUsed
			}
		}
		// The rollout of a package change is recorded before the profile: a
		// node killed after the write, before the devices have the package,
		// leaves it for the next start (ota_rollout.go).
		rollout, err := e.recordRollout(ctx, &dp, otaChanges(&old, &dp))
		if err != nil {
			return nil, err
		}
		err = e.writeProfile(ctx, &profileRecord{DeviceProfile: dp, deletionMarks: rec.deletionMarks, Promoting: rec.Promoting}, &prev)
		if rollout != nil && unwritten(err) {
			// Nothing to roll out: the record goes (a try again writes its
			// own), for left behind it would cost a takeover of the tenant's
			// devices. A failure that may come after the write keeps it.
			e.finishRollout(ctx, rollout)
		}
		switch {
		case errors.Is(err, storage.ErrChanged):
			if in.Version != 0 {
				return nil, errProfileVersion // the version the client named is gone
			}
			continue
		case err != nil:
			return nil, notFound(err)
		}
		if dp.Name != old.Name {
			if err := e.renameProfileDevices(ctx, &dp); err != nil {
				return nil, err
			}
			if err := e.renameProfileViews(ctx, dp.TenantID.ID, old.Name, dp.Name); err != nil {
				return nil, err
			}
		}
		// After the renaming: a refused save takes back only its packages,
		// and the devices' type must follow the name it keeps.
		if err := e.checkProfileOtaKept(ctx, p, &dp, &old); err != nil {
			return nil, err
		}
		return &dp, e.otaProfileSaved(ctx, rollout, &dp) // devices without their own package follow the profile's
	}
	return nil, errChangedMeanwhile
}

// unwritten reports whether err, from a record write, says it wrote nothing:
// a refusal (changed meanwhile, gone, a unique value taken, an engine error),
// not a failure whose outcome is unknown (the store unavailable, a timeout).
func unwritten(err error) bool {
	var refused *Error
	return errors.Is(err, storage.ErrChanged) || errors.Is(err, storage.ErrNotFound) ||
		errors.Is(err, storage.ErrConflict) || errors.As(err, &refused)
}

// checkProfileOtaKept runs after profile dp of p's tenant was written over
// old (nil: a new profile). If a deletion of a package dp has and old had not
// has begun meanwhile (see DeleteOtaPackage), the write is taken back as
// checkDeviceOtaKept does for a device and the save refused as if the package
// were gone: an updated profile gets old's packages back over its latest
// version (unless another write already changed the one that failed); a new
// one is deleted as DeleteDeviceProfile deletes, for a device may have been
// put on it already, or if that is refused (the default, or in use) keeps no
// package.
func (e *Engine) checkProfileOtaKept(ctx context.Context, p *Principal, dp, old *DeviceProfile) error {
	var oldFirmware, oldSoftware *EntityID
	if old != nil {
		oldFirmware, oldSoftware = old.FirmwareID, old.SoftwareID
	}
	typ, err := e.lostOta(ctx, dp.FirmwareID, dp.SoftwareID, oldFirmware, oldSoftware)
	if err != nil || typ == "" {
		return err
	}
	fail := errOtaMissing(typ)
	if old == nil {
		err := e.DeleteDeviceProfile(ctx, p, dp.ID.ID)
		switch {
		case err == nil, errors.Is(err, ErrNotFound):
			return fail
		case !errors.Is(err, errProfileInUse) && !errors.Is(err, errProfileDelDefault):
			return errors.Join(fail, err)
		}
		old = &DeviceProfile{}
	}
	lost := otaIDOf(typ, dp.FirmwareID, dp.SoftwareID)
	for range maxReplaceTries {
		rec, prev, err := e.loadProfile(ctx, dp.ID.ID)
		if errors.Is(err, storage.ErrNotFound) {
			return fail
		}
		if err != nil {
			return err
		}
		if otaIDOf(typ, rec.FirmwareID, rec.SoftwareID) != lost {
			return fail // changed already
		}
		rec.FirmwareID, rec.SoftwareID = old.FirmwareID, old.SoftwareID
		rec.Version++
		err = e.writeProfile(ctx, rec, &prev)
		switch {
		case errors.Is(err, storage.ErrChanged):
			continue
		case errors.Is(err, storage.ErrNotFound):
			return fail
		case err != nil:
			return err
		}
		return fail
	}
	return errChangedMeanwhile
}

// fillProfileDefaults gives the fields a client may leave out ThingsBoard's defaults.
func fillProfileDefaults(dp *DeviceProfile) {
	if dp.Type == "" {
		dp.Type = "DEFAULT"
	}
	if dp.TransportType == "" {
		dp.TransportType = "DEFAULT"
	}
	if dp.ProvisionType == "" {
		dp.ProvisionType = ProvisionDisabled
	}
	if dp.ProvisionDeviceKey != nil && *dp.ProvisionDeviceKey == "" {
		dp.ProvisionDeviceKey = nil
	}
	pd := &dp.ProfileData
	if len(pd.Configuration) == 0 || string(pd.Configuration) == "null" {
		pd.Configuration = defaultTypeJSON
	}
	if len(pd.TransportConfiguration) == 0 || string(pd.TransportConfiguration) == "null" {
		pd.TransportConfiguration = defaultTypeJSON
	}
	if pd.ProvisionConfiguration.Type == "" {
		pd.ProvisionConfiguration.Type = dp.ProvisionType
	}
}

// GetDeviceProfile returns a profile of p's tenant (tenant admins only).
func (e *Engine) GetDeviceProfile(ctx context.Context, p *Principal, id uuid.UUID) (*DeviceProfile, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	return e.tenantProfile(ctx, p, id)
}

// tenantProfile loads a profile of p's tenant: another tenant's is 403, an
// unknown id 404.
func (e *Engine) tenantProfile(ctx context.Context, p *Principal, id uuid.UUID) (*DeviceProfile, error) {
	dp, err := getRecord[DeviceProfile](ctx, e, kindProfile, id)
	if err != nil {
		return nil, notFound(err)
	}
	if dp.TenantID.ID != p.TenantID {
		return nil, ErrPermissionDenied
	}
	return dp, nil
}

// ListDeviceProfiles returns a page of the profiles of p's tenant (tenant admins only).
func (e *Engine) ListDeviceProfiles(ctx context.Context, p *Principal, pl PageLink) (PageData[*DeviceProfile], error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return PageData[*DeviceProfile]{}, err
	}
	all, err := listRecords[DeviceProfile](ctx, e, kindProfile, p.TenantID)
	if err != nil {
		return PageData[*DeviceProfile]{}, err
	}
	return makePage(all, pl, profilePages)
}

// DeleteDeviceProfile deletes a profile of p's tenant that is neither the default
// nor used by a device (tenant admins only).
//
// ThingsBoard has a foreign key; here a device saved while the deletion looks
// at the devices could still name the profile. So the deletion first marks the
// profile as being deleted (over the version it read), then lists the devices;
// a device save refuses a marked profile, and after writing its device reads
// the profile again and takes its write back if the profile is marked or gone
// (checkDeviceProfileKept). Either the save's second read comes before the
// mark, and then its device is written before the listing sees it, or it
// comes after and sees the mark: no device is left with a deleted profile.
//
// The OTA packages that name the profile go after it, bytes included
// (removeProfileOtaPackages), as ThingsBoard's foreign key cascades. A
// deletion interrupted between the two leaves packages of a profile that is
// gone: the next deletion of the profile id removes them, and answers 404.
func (e *Engine) DeleteDeviceProfile(ctx context.Context, p *Principal, id uuid.UUID) error {
	if err := requireRole(p, TenantAdmin); err != nil {
		return err
	}
	deletion := newDeletionID()
	if err := e.markProfileDeleting(ctx, p, id, deletion, true); err != nil {
		if errors.Is(err, ErrNotFound) {
			// Only p's tenant's packages: another tenant's profile id finds none.
			if cerr := e.removeProfileOtaPackages(ctx, p.TenantID, id); cerr != nil {
				return errors.Join(err, cerr)
			}
		}
		return err
	}
	used, err := e.profileInUse(ctx, p.TenantID, id)
	if err == nil && used {
		err = errProfileInUse
	}
	if err == nil {
		err = markHeld[profileRecord](ctx, e, kindProfile, id, deletion)
	}
	if err != nil {
		// Not deleted after all: devices may use it again.
		if uerr := e.markProfileDeleting(ctx, p, id, deletion, false); uerr != nil && !errors.Is(uerr, ErrNotFound) {
			return errors.Join(err, uerr)
		}
		return err
	}
	if err := e.deleteRecord(ctx, kindProfile, id); err != nil {
		return notFound(err)
	}
	return e.removeProfileOtaPackages(ctx, p.TenantID, id)
}

// profileInUse is whether a device of tenant has the profile.
func (e *Engine) profileInUse(ctx context.Context, tenant, id uuid.UUID) (bool, error) {
	devices, err := listRecords[Device](ctx, e, kindDevice, tenant)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(devices, func(d *Device) bool { return d.DeviceProfileID.ID == id }), nil
}

// renameProfileDevices gives the devices of a renamed profile its new name as
// their type, as ThingsBoard's DeviceProfileServiceImpl does after the save;
// each over its latest version, so no concurrent device write is undone.
func (e *Engine) renameProfileDevices(ctx context.Context, dp *DeviceProfile) error {
	devices, err := listRecords[Device](ctx, e, kindDevice, dp.TenantID.ID)
	if err != nil {
		return err
	}
	for _, d := range devices {
		if d.DeviceProfileID.ID != dp.ID.ID {
			continue
		}
		if err := e.setDeviceType(ctx, d.ID.ID, dp); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return err
		}
	}
	return nil
}

// setDeviceType writes dp's name as the type of a device that still has dp.
func (e *Engine) setDeviceType(ctx context.Context, id uuid.UUID, dp *DeviceProfile) error {
	for range maxReplaceTries {
		d, prev, err := loadRecord[Device](ctx, e, kindDevice, id)
		if err != nil {
			return err
		}
		if d.DeviceProfileID.ID != dp.ID.ID || d.Type == dp.Name {
			return nil
		}
		d.Type = dp.Name
		d.Version++
		err = e.replaceRecord(ctx, kindDevice, id, d.TenantID(), prev, d, deviceNameKey(d.TenantID(), d.Name))
		if errors.Is(err, storage.ErrChanged) {
			continue
		}
		if err != nil {
			return err
		}
		return e.evictDevice(ctx, id)
	}
	return errChangedMeanwhile
}

// markProfileDeleting sets or takes back the mark of a deletion of a profile
// of p's tenant, over its latest version. Setting it refuses the default
// profile.
func (e *Engine) markProfileDeleting(ctx context.Context, p *Principal, id uuid.UUID, deletion string, deleting bool) error {
	for range maxReplaceTries {
		rec, prev, err := e.loadProfile(ctx, id)
		if err != nil {
			return notFound(err)
		}
		if rec.TenantID.ID != p.TenantID {
			return ErrPermissionDenied
		}
		if deleting && (rec.Default || rec.Promoting) {
			return errProfileDelDefault
		}
		if !rec.setMark(deletion, deleting, e.now()) {
			return nil
		}
		err = e.writeProfile(ctx, rec, &prev)
		if errors.Is(err, storage.ErrChanged) {
			continue
		}
		return notFound(err)
	}
	return errChangedMeanwhile
}

// usableProfile is whether a stored profile may be given to a device: it
// exists and no deletion of it is under way.
func (e *Engine) usableProfile(ctx context.Context, id uuid.UUID) (bool, error) {
	rec, _, err := e.loadProfile(ctx, id)
	if errors.Is(err, storage.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !rec.marked(e.now()), nil
}
