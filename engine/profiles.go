package engine

import (
	"context"
	"errors"
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

// putProfile stores a profile with its unique name, default marker and provision key.
func (e *Engine) putProfile(ctx context.Context, dp *DeviceProfile) error {
	tenant := dp.TenantID.ID
	unique := []string{profileNameKey(tenant, dp.Name)}
	if dp.Default {
		unique = append(unique, defaultProfileKey(tenant))
	}
	if dp.ProvisionDeviceKey != nil && *dp.ProvisionDeviceKey != "" {
		unique = append(unique, provisionKeyKey(*dp.ProvisionDeviceKey))
	}
	err := e.putRecord(ctx, kindProfile, dp.ID.ID, tenant, dp, unique...)
	if errors.Is(err, storage.ErrConflict) {
		return e.profileConflict(ctx, dp)
	}
	return err
}

// profileConflict tells which unique value of dp was taken.
func (e *Engine) profileConflict(ctx context.Context, dp *DeviceProfile) error {
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
	for range 2 {
		dp, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, defaultProfileKey(tenant))
		if err == nil || !errors.Is(err, storage.ErrNotFound) {
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
		if !errors.Is(err, storage.ErrConflict) && !errors.Is(err, errProfileNameTaken) {
			return nil, err
		}
		// Another caller created it at the same time: read theirs.
	}
	return nil, fmtConflict(kindProfile, tenant)
}

// profileByName returns the tenant's profile of that name, creating a DEFAULT one if
// there is none (ThingsBoard's findOrCreateDeviceProfile).
func (e *Engine) profileByName(ctx context.Context, tenant uuid.UUID, name string) (*DeviceProfile, error) {
	for range 2 {
		dp, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, profileNameKey(tenant, name))
		if err == nil || !errors.Is(err, storage.ErrNotFound) {
			return dp, err
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

// GetDefaultProfileInfo returns the short form of the default profile of p's tenant.
func (e *Engine) GetDefaultProfileInfo(ctx context.Context, p *Principal) (*DeviceProfileInfo, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	dp, err := e.defaultProfile(ctx, p.TenantID)
	if err != nil {
		return nil, err
	}
	info := dp.Info()
	return &info, nil
}

// SaveDeviceProfile creates or updates a profile of p's tenant (tenant admins only).
// The default flag cannot be changed here: a tenant's first profile is its default.
// Renaming a profile does not rename the type of its devices yet.
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
	dp := *in
	dp.TenantID = newEntityID(EntityTenant, p.TenantID)
	if in.ID.ID != uuid.Nil {
		old, err := e.GetDeviceProfile(ctx, p, in.ID.ID)
		if err != nil {
			return nil, err
		}
		dp.CreatedTime, dp.Version, dp.Default = old.CreatedTime, old.Version+1, old.Default
	} else {
		dp.ID = newEntityID(EntityDeviceProfile, newID())
		dp.CreatedTime, dp.Version = e.now().UnixMilli(), 1
		_, err := lookupRecord[DeviceProfile](ctx, e, kindProfile, defaultProfileKey(p.TenantID))
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return nil, err
		}
		dp.Default = err != nil
	}
	fillProfileDefaults(&dp)
	prev, err := e.checkProfileOta(ctx, &dp)
	if err != nil {
		return nil, err
	}
	if err := e.putProfile(ctx, &dp); err != nil {
		return nil, err
	}
	return &dp, e.otaProfileSaved(ctx, prev, &dp) // devices without their own package follow the profile's
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
func (e *Engine) DeleteDeviceProfile(ctx context.Context, p *Principal, id uuid.UUID) error {
	dp, err := e.GetDeviceProfile(ctx, p, id)
	if err != nil {
		return err
	}
	if dp.Default {
		return errProfileDelDefault
	}
	devices, err := listRecords[Device](ctx, e, kindDevice, p.TenantID)
	if err != nil {
		return err
	}
	for _, d := range devices {
		if d.DeviceProfileID.ID == id {
			return errProfileInUse
		}
	}
	return notFound(e.deleteRecord(ctx, kindProfile, id))
}
