package engine

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"time"

	"github.com/bytedance/sonic"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// Tenant profiles hold the rate limits of their tenants, in ThingsBoard's shape:
// profileData.configuration with the DefaultTenantProfileConfiguration fields
// (compat §9). Sluice reads the limit fields below and rpcTtlDays, and keeps the
// rest of the configuration verbatim. Every tenant has a profile; one profile is the default,
// created on first use with every limit null (unlimited).

// EntityTenantProfile is the entity type of tenant profile ids.
const EntityTenantProfile = "TENANT_PROFILE"

// DefaultTenantProfileName is the name of the default tenant profile.
const DefaultTenantProfileName = "Default"

const kindTenantProfile = "tenantProfile"

func tenantProfileNameKey(name string) string { return "name:" + name }

const defaultTenantProfileKey = "default"

// limitsTopic carries tenant-limit evictions to the other nodes: a tenant id, or
// empty for every tenant (a profile changed).
const limitsTopic = "engine:limits"

var (
	errTenantProfileNameBlank  = &Error{Code: CodeBadRequestParams, Msg: "Tenant profile name should be specified!"}
	errTenantProfileNameTaken  = &Error{Code: CodeBadRequestParams, Msg: "Tenant profile with such name already exists!"}
	errTenantProfileDelDefault = &Error{Code: CodeBadRequestParams, Msg: "Deletion of Default Tenant Profile is prohibited!"}
	errTenantProfileInUse      = &Error{Code: CodeBadRequestParams, Msg: "The tenant profile referenced by the tenants cannot be deleted!"}
	errTenantProfileMissing    = &Error{Code: CodeBadRequestParams, Msg: "Tenant profile is not found!"}
	errTenantProfileConfig     = &Error{Code: CodeBadRequestParams, Msg: "Tenant profile configuration must be a JSON object!"}
)

// TenantProfileData is the profileData of a tenant profile.
type TenantProfileData struct {
	Configuration      json.RawMessage `json:"configuration"`
	QueueConfiguration json.RawMessage `json:"queueConfiguration"`
}

// TenantProfile is a ThingsBoard tenant profile.
type TenantProfile struct {
	ID                   EntityID          `json:"id"`
	CreatedTime          int64             `json:"createdTime"`
	Name                 string            `json:"name"`
	Description          string            `json:"description"`
	IsolatedTbRuleEngine bool              `json:"isolatedTbRuleEngine"`
	ProfileData          TenantProfileData `json:"profileData"`
	Default              bool              `json:"default"`
	Version              int64             `json:"version"`
}

// EntityInfo is ThingsBoard's {"id","name"} short form of an entity.
type EntityInfo struct {
	ID   EntityID `json:"id"`
	Name string   `json:"name"`
}

// limitFields are the configuration fields Sluice enforces (compat §9).
type limitFields struct {
	TransportTenantMsgRateLimit                 string `json:"transportTenantMsgRateLimit"`
	TransportTenantTelemetryMsgRateLimit        string `json:"transportTenantTelemetryMsgRateLimit"`
	TransportTenantTelemetryDataPointsRateLimit string `json:"transportTenantTelemetryDataPointsRateLimit"`
	TransportDeviceMsgRateLimit                 string `json:"transportDeviceMsgRateLimit"`
	TransportDeviceTelemetryMsgRateLimit        string `json:"transportDeviceTelemetryMsgRateLimit"`
	TransportDeviceTelemetryDataPointsRateLimit string `json:"transportDeviceTelemetryDataPointsRateLimit"`
	TenantServerRestLimitsConfiguration         string `json:"tenantServerRestLimitsConfiguration"`
	CustomerServerRestLimitsConfiguration       string `json:"customerServerRestLimitsConfiguration"`
	RPCTTLDays                                  int64  `json:"rpcTtlDays"`
}

// maxTTLDays caps a retention in days, so that it fits a time.Duration.
const maxTTLDays = 100 * 365

// defaultTenantConfiguration is the configuration of a new profile: every limit null.
var defaultTenantConfiguration = json.RawMessage(`{"type":"DEFAULT",` +
	`"transportTenantMsgRateLimit":null,"transportTenantTelemetryMsgRateLimit":null,` +
	`"transportTenantTelemetryDataPointsRateLimit":null,"transportDeviceMsgRateLimit":null,` +
	`"transportDeviceTelemetryMsgRateLimit":null,"transportDeviceTelemetryDataPointsRateLimit":null,` +
	`"tenantServerRestLimitsConfiguration":null,"customerServerRestLimitsConfiguration":null}`)

// parseLimits reads the limits of a profile configuration; a bad limit string is
// a 400 naming the field.
func parseLimits(conf json.RawMessage) (*tenantLimits, error) {
	trimmed := strings.TrimSpace(string(conf))
	if trimmed == "" || trimmed == "null" {
		return noLimits, nil
	}
	if trimmed[0] != '{' {
		return nil, errTenantProfileConfig
	}
	var f limitFields
	if err := sonic.Unmarshal(conf, &f); err != nil {
		// sonic's error quotes the decoder's position dump: name the field
		// instead, as encoding/json finds it.
		var te *json.UnmarshalTypeError
		if errors.As(json.Unmarshal(conf, &f), &te) && te.Field != "" {
			want := "string"
			if te.Type.Kind() != reflect.String {
				want = "integer"
			}
			return nil, Errorf(CodeBadRequestParams, "Invalid tenant profile configuration: %s must be a %s, not a %s", te.Field, want, te.Value)
		}
		return nil, Errorf(CodeBadRequestParams, "Invalid tenant profile configuration")
	}
	l := &tenantLimits{}
	for _, x := range []struct {
		name string
		conf string
		dst  **rateLimit
	}{
		{"transportTenantMsgRateLimit", f.TransportTenantMsgRateLimit, &l.tenantMsg},
		{"transportTenantTelemetryMsgRateLimit", f.TransportTenantTelemetryMsgRateLimit, &l.tenantTelemetry},
		{"transportTenantTelemetryDataPointsRateLimit", f.TransportTenantTelemetryDataPointsRateLimit, &l.tenantPoints},
		{"transportDeviceMsgRateLimit", f.TransportDeviceMsgRateLimit, &l.deviceMsg},
		{"transportDeviceTelemetryMsgRateLimit", f.TransportDeviceTelemetryMsgRateLimit, &l.deviceTelemetry},
		{"transportDeviceTelemetryDataPointsRateLimit", f.TransportDeviceTelemetryDataPointsRateLimit, &l.devicePoints},
		{"tenantServerRestLimitsConfiguration", f.TenantServerRestLimitsConfiguration, &l.tenantREST},
		{"customerServerRestLimitsConfiguration", f.CustomerServerRestLimitsConfiguration, &l.customerREST},
	} {
		rl, err := parseRateLimit(x.conf)
		if err != nil {
			return nil, Errorf(CodeBadRequestParams, "Invalid %s: %v (want \"capacity:seconds[,capacity:seconds…]\")", x.name, err)
		}
		*x.dst = rl
	}
	if f.RPCTTLDays < 0 {
		return nil, Errorf(CodeBadRequestParams, "Invalid rpcTtlDays: %d (want 0, keep, or a number of days)", f.RPCTTLDays)
	}
	l.rpcTTL = time.Duration(min(f.RPCTTLDays, maxTTLDays)) * 24 * time.Hour
	if l.none() {
		return noLimits, nil
	}
	return l, nil
}

// initLimits sets up the tenant-limits cache and its evictions from other nodes.
func (e *Engine) initLimits() {
	e.limits.tenants.ttl = e.cfg.AuthCacheTTL
	e.cfg.Notifier.Subscribe(limitsTopic, func(msg []byte) {
		if id, err := uuid.ParseBytes(msg); err == nil {
			e.limits.tenants.evict(id)
			return
		}
		e.limits.tenants.clear()
	})
}

// evictLimitsEverywhere forgets the cached limits of a tenant (uuid.Nil: of every
// tenant) on every node. Call it after the change is in storage.
func (e *Engine) evictLimitsEverywhere(tenant uuid.UUID) {
	var msg []byte
	if tenant == uuid.Nil {
		e.limits.tenants.clear()
	} else {
		e.limits.tenants.evict(tenant)
		msg = []byte(tenant.String())
	}
	if err := e.cfg.Notifier.Publish(context.Background(), limitsTopic, msg); err != nil {
		e.cfg.Logger.Warn("cannot publish a tenant limits eviction; other nodes rely on their cache TTL", "err", err)
	}
}

// tenantLimits returns the parsed limits of a tenant, cached for
// Config.AuthCacheTTL. A tenant that does not exist (any more) is unlimited: its
// requests fail elsewhere.
func (e *Engine) tenantLimits(ctx context.Context, tenant uuid.UUID, now time.Time) (*tenantLimits, error) {
	return e.limits.tenants.get(now, tenant, func() (*tenantLimits, error) {
		t, err := getRecord[Tenant](ctx, e, kindTenant, tenant)
		if errors.Is(err, storage.ErrNotFound) {
			return noLimits, nil
		}
		if err != nil {
			return nil, err
		}
		tp, err := e.profileOfTenant(ctx, t)
		if err != nil {
			return nil, err
		}
		l, err := parseLimits(tp.ProfileData.Configuration)
		if err != nil {
			// Saved profiles are validated; an unreadable one limits nothing.
			e.cfg.Logger.Warn("tenant profile has invalid limits; not enforcing them", "tenantProfile", tp.ID.ID, "err", err)
			return noLimits, nil
		}
		return l, nil
	})
}

// profileOfTenant returns the tenant's profile; a tenant stored without one (or
// whose profile is gone) has the default.
func (e *Engine) profileOfTenant(ctx context.Context, t *Tenant) (*TenantProfile, error) {
	if t.TenantProfileID != nil && t.TenantProfileID.ID != uuid.Nil {
		tp, err := getRecord[TenantProfile](ctx, e, kindTenantProfile, t.TenantProfileID.ID)
		if err == nil || !errors.Is(err, storage.ErrNotFound) {
			return tp, err
		}
	}
	return e.defaultTenantProfile(ctx)
}

// defaultTenantProfile returns the default tenant profile, creating it if missing.
func (e *Engine) defaultTenantProfile(ctx context.Context) (*TenantProfile, error) {
	for range 2 {
		tp, err := lookupRecord[TenantProfile](ctx, e, kindTenantProfile, defaultTenantProfileKey)
		if err == nil || !errors.Is(err, storage.ErrNotFound) {
			return tp, err
		}
		name := DefaultTenantProfileName
		if _, err := lookupRecord[TenantProfile](ctx, e, kindTenantProfile, tenantProfileNameKey(name)); err == nil {
			name = DefaultTenantProfileName + "-" + randomString(6)
		}
		tp = &TenantProfile{
			ID:          newEntityID(EntityTenantProfile, newID()),
			CreatedTime: e.now().UnixMilli(),
			Name:        name,
			Description: "Default tenant profile",
			ProfileData: TenantProfileData{Configuration: defaultTenantConfiguration},
			Default:     true,
			Version:     1,
		}
		err = e.putTenantProfile(ctx, tp)
		if err == nil {
			return tp, nil
		}
		if !errors.Is(err, storage.ErrConflict) && !errors.Is(err, errTenantProfileNameTaken) {
			return nil, err
		}
		// Another node created it at the same time: read theirs.
	}
	return nil, fmtConflict(kindTenantProfile, uuid.Nil)
}

// putTenantProfile stores a profile with its unique name and default marker.
func (e *Engine) putTenantProfile(ctx context.Context, tp *TenantProfile) error {
	unique := []string{tenantProfileNameKey(tp.Name)}
	if tp.Default {
		unique = append(unique, defaultTenantProfileKey)
	}
	err := e.putRecord(ctx, kindTenantProfile, tp.ID.ID, uuid.Nil, tp, unique...)
	if errors.Is(err, storage.ErrConflict) {
		if other, lerr := lookupRecord[TenantProfile](ctx, e, kindTenantProfile, tenantProfileNameKey(tp.Name)); lerr == nil && other.ID != tp.ID {
			return errTenantProfileNameTaken
		}
	}
	return err
}

// tenantProfileIDFor returns the id of the profile a tenant being saved gets: the
// one it names, which must exist, or the default.
func (e *Engine) tenantProfileIDFor(ctx context.Context, id *EntityID) (*EntityID, error) {
	if id != nil && id.ID != uuid.Nil {
		if _, err := getRecord[TenantProfile](ctx, e, kindTenantProfile, id.ID); err != nil {
			return nil, ifNotFound(err, errTenantProfileMissing)
		}
		out := newEntityID(EntityTenantProfile, id.ID)
		return &out, nil
	}
	tp, err := e.defaultTenantProfile(ctx)
	if err != nil {
		return nil, err
	}
	return &tp.ID, nil
}

// SaveTenantProfile creates (zero ID) or updates a tenant profile; system
// administrators only. The limit fields must parse; whether a profile is the
// default is kept as stored (a new one is not). The profile's tenants get the new
// limits at once on this node, and within a second on others.
func (e *Engine) SaveTenantProfile(ctx context.Context, p *Principal, in *TenantProfile) (*TenantProfile, error) {
	if err := requireRole(p, SysAdmin); err != nil {
		return nil, err
	}
	if strings.TrimSpace(in.Name) == "" {
		return nil, errTenantProfileNameBlank
	}
	if err := checkLengths("name", in.Name); err != nil {
		return nil, err
	}
	tp := *in
	if len(strings.TrimSpace(string(tp.ProfileData.Configuration))) == 0 || string(tp.ProfileData.Configuration) == "null" {
		tp.ProfileData.Configuration = defaultTenantConfiguration
	}
	if _, err := parseLimits(tp.ProfileData.Configuration); err != nil {
		return nil, err
	}
	if in.ID.ID != uuid.Nil {
		old, err := getRecord[TenantProfile](ctx, e, kindTenantProfile, in.ID.ID)
		if err != nil {
			return nil, notFound(err)
		}
		tp.ID, tp.CreatedTime, tp.Version, tp.Default = old.ID, old.CreatedTime, old.Version+1, old.Default
	} else {
		tp.ID = newEntityID(EntityTenantProfile, newID())
		tp.CreatedTime, tp.Version, tp.Default = e.now().UnixMilli(), 1, false
	}
	tp.ID.EntityType = EntityTenantProfile
	if err := e.putTenantProfile(ctx, &tp); err != nil {
		return nil, err
	}
	e.evictLimitsEverywhere(uuid.Nil)
	return &tp, nil
}

// GetTenantProfile returns a tenant profile; system administrators only.
func (e *Engine) GetTenantProfile(ctx context.Context, p *Principal, id uuid.UUID) (*TenantProfile, error) {
	if err := requireRole(p, SysAdmin); err != nil {
		return nil, err
	}
	tp, err := getRecord[TenantProfile](ctx, e, kindTenantProfile, id)
	return tp, notFound(err)
}

// DefaultTenantProfileInfo returns {"id","name"} of the default tenant profile;
// system administrators only.
func (e *Engine) DefaultTenantProfileInfo(ctx context.Context, p *Principal) (*EntityInfo, error) {
	if err := requireRole(p, SysAdmin); err != nil {
		return nil, err
	}
	tp, err := e.defaultTenantProfile(ctx)
	if err != nil {
		return nil, err
	}
	return &EntityInfo{ID: tp.ID, Name: tp.Name}, nil
}

var tenantProfilePages = pageSpec[*TenantProfile]{
	text: func(tp *TenantProfile) string { return tp.Name },
	keys: map[string]func(*TenantProfile) sortKey{
		"createdTime": func(tp *TenantProfile) sortKey { return numKey(tp.CreatedTime) },
		"name":        func(tp *TenantProfile) sortKey { return strKey(tp.Name) },
		"description": func(tp *TenantProfile) sortKey { return strKey(tp.Description) },
		"isDefault": func(tp *TenantProfile) sortKey {
			if tp.Default {
				return numKey(1)
			}
			return numKey(0)
		},
	},
}

// ListTenantProfiles returns a page of tenant profiles; system administrators only.
func (e *Engine) ListTenantProfiles(ctx context.Context, p *Principal, pl PageLink) (PageData[*TenantProfile], error) {
	if err := requireRole(p, SysAdmin); err != nil {
		return PageData[*TenantProfile]{}, err
	}
	if _, err := e.defaultTenantProfile(ctx); err != nil {
		return PageData[*TenantProfile]{}, err
	}
	all, err := listRecords[TenantProfile](ctx, e, kindTenantProfile, uuid.Nil)
	if err != nil {
		return PageData[*TenantProfile]{}, err
	}
	return makePage(all, pl, tenantProfilePages)
}

// DeleteTenantProfile deletes a tenant profile that is neither the default nor
// used by a tenant; system administrators only.
func (e *Engine) DeleteTenantProfile(ctx context.Context, p *Principal, id uuid.UUID) error {
	if err := requireRole(p, SysAdmin); err != nil {
		return err
	}
	tp, err := getRecord[TenantProfile](ctx, e, kindTenantProfile, id)
	if err != nil {
		return notFound(err)
	}
	if tp.Default {
		return errTenantProfileDelDefault
	}
	tenants, err := listRecords[Tenant](ctx, e, kindTenant, uuid.Nil)
	if err != nil {
		return err
	}
	for _, t := range tenants {
		if t.TenantProfileID != nil && t.TenantProfileID.ID == id {
			return errTenantProfileInUse
		}
	}
	return notFound(e.deleteRecord(ctx, kindTenantProfile, id))
}
