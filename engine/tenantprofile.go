package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/bytedance/sonic"
	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// Tenant profiles hold the rate limits of their tenants, in ThingsBoard's shape:
// profileData.configuration with the DefaultTenantProfileConfiguration fields
// (compat §9). Sluice reads the limit fields below, rpcTtlDays and the entity
// limits (limits_entities.go), and keeps the rest of the configuration
// verbatim. Every tenant has a profile; one profile is the default, created on
// first use with every limit null (unlimited).

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
	// errTenantProfileOtherDefault is a promotion that found another default
	// made meanwhile; SetDefaultTenantProfile tries again.
	errTenantProfileOtherDefault = &Error{Code: CodeBadRequestParams, Msg: "Another default tenant profile is present!"}
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
	if err := decodeConfiguration(conf, &f); err != nil {
		return nil, err
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

// decodeConfiguration decodes a profile configuration, a JSON object, into
// the fields f points to; a mistyped field is a 400 naming it.
func decodeConfiguration(conf json.RawMessage, f any) error {
	if err := sonic.Unmarshal(conf, f); err != nil {
		// sonic's error quotes the decoder's position dump: name the field
		// instead, as encoding/json finds it.
		var te *json.UnmarshalTypeError
		if errors.As(json.Unmarshal(conf, f), &te) && te.Field != "" {
			want := "string"
			if te.Type.Kind() != reflect.String {
				want = "integer"
			}
			return Errorf(CodeBadRequestParams, "Invalid tenant profile configuration: %s must be a %s, not a %s", te.Field, want, te.Value)
		}
		return Errorf(CodeBadRequestParams, "Invalid tenant profile configuration")
	}
	return nil
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
			l = noLimits
		}
		// The entity limits read apart: a stored profile whose entity limits do
		// not read (saved before Sluice read them) keeps its rate limits.
		ent, err := parseEntityLimits(tp.ProfileData.Configuration)
		if err != nil {
			e.cfg.Logger.Warn("tenant profile has invalid entity limits; not enforcing them", "tenantProfile", tp.ID.ID, "err", err)
		} else if ent != (entityLimits{}) {
			withEntities := *l
			withEntities.entities = ent
			l = &withEntities
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
	for range 3 {
		tp, err := lookupRecord[TenantProfile](ctx, e, kindTenantProfile, defaultTenantProfileKey)
		if err == nil || !errors.Is(err, storage.ErrNotFound) {
			return tp, err
		}
		// A change of default half-way (see tenantProfileRecord): finish it.
		if tp, err := e.finishTenantProfilePromotion(ctx); err != nil || tp != nil {
			if errors.Is(err, storage.ErrChanged) || errors.Is(err, errTenantProfileOtherDefault) {
				continue // another caller finished it or changed it: look again
			}
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
		if !errors.Is(err, storage.ErrConflict) && !errors.Is(err, errTenantProfileNameTaken) && !errors.Is(err, errTenantProfileOtherDefault) {
			return nil, err
		}
		// Another node created it at the same time: read theirs.
	}
	return nil, fmtConflict(kindTenantProfile, uuid.Nil)
}

// tenantProfileRecord is a tenant profile as stored. Promoting marks a profile
// SetDefaultTenantProfile is making the default: between its taking the flag
// off the old default and putting it on this one there is none, and
// defaultTenantProfile then finishes the change rather than creating another.
// Deleting marks a profile whose deletion is under way: tenant saves refuse it
// (see DeleteTenantProfile, deletionMarks). Code that reads a TenantProfile sees neither.
type tenantProfileRecord struct {
	TenantProfile
	Promoting bool `json:"promoting,omitempty"`
	deletionMarks
}

// putTenantProfile stores a new profile with its unique name and default marker.
func (e *Engine) putTenantProfile(ctx context.Context, tp *TenantProfile) error {
	return e.writeTenantProfile(ctx, &tenantProfileRecord{TenantProfile: *tp}, nil)
}

// writeTenantProfile stores r: with Put, or over the version read as *prev
// (storage.ErrChanged, storage.ErrNotFound as replaceRecord).
func (e *Engine) writeTenantProfile(ctx context.Context, r *tenantProfileRecord, prev *[]byte) error {
	if r.Default {
		r.Promoting = false
	}
	unique := []string{tenantProfileNameKey(r.Name)}
	if r.Default {
		unique = append(unique, defaultTenantProfileKey)
	}
	err := e.writeRecord(ctx, kindTenantProfile, r.ID.ID, uuid.Nil, prev, r, unique)
	if errors.Is(err, storage.ErrConflict) {
		if other, lerr := lookupRecord[TenantProfile](ctx, e, kindTenantProfile, tenantProfileNameKey(r.Name)); lerr == nil && other.ID != r.ID {
			return errTenantProfileNameTaken
		}
		if other, lerr := lookupRecord[TenantProfile](ctx, e, kindTenantProfile, defaultTenantProfileKey); r.Default && lerr == nil && other.ID != r.ID {
			return errTenantProfileOtherDefault
		}
	}
	return err
}

// loadTenantProfile reads a stored profile with its data, for writeTenantProfile.
func (e *Engine) loadTenantProfile(ctx context.Context, id uuid.UUID) (*tenantProfileRecord, []byte, error) {
	return loadRecord[tenantProfileRecord](ctx, e, kindTenantProfile, id)
}

// finishTenantProfilePromotion makes a profile marked Promoting the default;
// nil when there is none.
func (e *Engine) finishTenantProfilePromotion(ctx context.Context) (*TenantProfile, error) {
	all, err := listRecords[tenantProfileRecord](ctx, e, kindTenantProfile, uuid.Nil)
	if err != nil {
		return nil, err
	}
	for _, r := range all {
		if r.Promoting {
			return e.promoteTenantProfile(ctx, r.ID.ID)
		}
	}
	return nil, nil
}

// promoteTenantProfile makes a profile marked Promoting the default, over the
// version read: storage.ErrChanged when it changed meanwhile,
// errTenantProfileOtherDefault when another default appeared.
func (e *Engine) promoteTenantProfile(ctx context.Context, id uuid.UUID) (*TenantProfile, error) {
	r, prev, err := e.loadTenantProfile(ctx, id)
	if err != nil {
		return nil, err
	}
	if !r.Promoting {
		return nil, fmt.Errorf("tenant profile %s: %w", id, storage.ErrChanged)
	}
	r.Default, r.Promoting = true, false
	r.Version++
	if err := e.writeTenantProfile(ctx, r, &prev); err != nil {
		return nil, err
	}
	return &r.TenantProfile, nil
}

// demoteDefaultTenantProfile takes the default flag off the default profile
// unless it is keep.
func (e *Engine) demoteDefaultTenantProfile(ctx context.Context, keep uuid.UUID) error {
	for range maxReplaceTries {
		cur, err := lookupRecord[TenantProfile](ctx, e, kindTenantProfile, defaultTenantProfileKey)
		if errors.Is(err, storage.ErrNotFound) || (err == nil && cur.ID.ID == keep) {
			return nil
		}
		if err != nil {
			return err
		}
		r, prev, err := e.loadTenantProfile(ctx, cur.ID.ID)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if !r.Default {
			continue
		}
		r.Default = false
		r.Version++
		err = e.writeTenantProfile(ctx, r, &prev)
		if errors.Is(err, storage.ErrChanged) || errors.Is(err, storage.ErrNotFound) {
			continue
		}
		return err
	}
	return errChangedMeanwhile
}

// dropPromotingMark takes the Promoting mark off a profile a failed change of
// default left it on, over the version read, while another profile is the
// default; a later change sets it again. With no default (the old one was
// demoted) the mark stays: defaultTenantProfile finishes the change with it.
func (e *Engine) dropPromotingMark(ctx context.Context, id uuid.UUID) {
	if _, err := lookupRecord[TenantProfile](ctx, e, kindTenantProfile, defaultTenantProfileKey); err != nil {
		return
	}
	r, prev, err := e.loadTenantProfile(ctx, id)
	if err != nil || !r.Promoting {
		return
	}
	r.Promoting = false
	if err := e.writeTenantProfile(ctx, r, &prev); err != nil && !errors.Is(err, storage.ErrChanged) && !errors.Is(err, storage.ErrNotFound) {
		e.cfg.Logger.Warn("cannot clear the mark of a failed change of the default tenant profile", "tenantProfile", id, "err", err)
	}
}

// SetDefaultTenantProfile makes a tenant profile the default (system
// administrators only), as ThingsBoard's POST /api/tenantProfile/{id}/default:
// tenants saved without a profile get it from now on; tenants that have a
// profile keep theirs. The default is a unique value of the profile records,
// so the change is three writes: the profile is marked Promoting, the old
// default loses the flag, the profile gets it; a caller that finds no default
// in between finishes the change (defaultTenantProfile).
func (e *Engine) SetDefaultTenantProfile(ctx context.Context, p *Principal, id uuid.UUID) (tp *TenantProfile, err error) {
	if err := requireRole(p, SysAdmin); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			e.dropPromotingMark(ctx, id) // else the profile would read as becoming the default for good
		}
	}()
	for range maxReplaceTries {
		r, prev, err := e.loadTenantProfile(ctx, id)
		if err != nil {
			return nil, notFound(err)
		}
		switch {
		case r.Default:
			return &r.TenantProfile, nil
		case r.marked(e.now()):
			return nil, errChangedMeanwhile // a deletion is under way: it is 404 soon, or usable again
		case !r.Promoting:
			r.Promoting = true
			if err := e.writeTenantProfile(ctx, r, &prev); errors.Is(err, storage.ErrChanged) {
				continue
			} else if err != nil {
				return nil, notFound(err)
			}
		}
		if err := e.demoteDefaultTenantProfile(ctx, id); err != nil {
			return nil, err
		}
		tp, err := e.promoteTenantProfile(ctx, id)
		switch {
		case errors.Is(err, storage.ErrChanged), errors.Is(err, errTenantProfileOtherDefault):
			continue // an update, or another default meanwhile: again
		case err != nil:
			return nil, notFound(err)
		}
		e.evictLimitsEverywhere(uuid.Nil) // tenants stored without a profile have the default's limits
		return tp, nil
	}
	return nil, errChangedMeanwhile
}

// tenantProfileIDFor returns the id of the profile a tenant being saved gets: the
// one it names, which must exist, or the default.
func (e *Engine) tenantProfileIDFor(ctx context.Context, id *EntityID) (*EntityID, error) {
	if id != nil && id.ID != uuid.Nil {
		if ok, err := e.usableTenantProfile(ctx, id.ID); err != nil || !ok {
			return nil, cmp.Or(err, error(errTenantProfileMissing))
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
	if _, err := parseEntityLimits(tp.ProfileData.Configuration); err != nil {
		return nil, err
	}
	if in.ID.ID == uuid.Nil {
		tp.ID = newEntityID(EntityTenantProfile, newID())
		tp.CreatedTime, tp.Version, tp.Default = e.now().UnixMilli(), 1, false
		if err := e.putTenantProfile(ctx, &tp); err != nil {
			return nil, err
		}
		return &tp, nil
	}
	// An update, over the version read: a concurrent change of default or a
	// deletion under way keeps its marks.
	for range maxReplaceTries {
		old, prev, err := e.loadTenantProfile(ctx, in.ID.ID)
		if err != nil {
			return nil, notFound(err)
		}
		tp.ID, tp.CreatedTime, tp.Version, tp.Default = old.ID, old.CreatedTime, old.Version+1, old.Default
		tp.ID.EntityType = EntityTenantProfile
		r := &tenantProfileRecord{TenantProfile: tp, Promoting: old.Promoting, deletionMarks: old.deletionMarks}
		err = e.writeTenantProfile(ctx, r, &prev)
		if errors.Is(err, storage.ErrChanged) {
			continue
		}
		if err != nil {
			return nil, notFound(err)
		}
		e.evictLimitsEverywhere(uuid.Nil)
		return &tp, nil
	}
	return nil, errChangedMeanwhile
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
		"id":          func(tp *TenantProfile) sortKey { return idKey(tp.ID.ID) }, // ThingsBoard's default sort
		"description": func(tp *TenantProfile) sortKey { return strKey(tp.Description) },
		"isDefault": func(tp *TenantProfile) sortKey {
			if tp.Default {
				return numKey(1)
			}
			return numKey(0)
		},
	},
}

// tenantProfileInfoPages sorts /api/tenantProfileInfos: by "id" and "name", as
// ThingsBoard allows, and by createdTime when no sort is asked for.
var tenantProfileInfoPages = pageSpec[*TenantProfile]{
	text: tenantProfilePages.text,
	keys: map[string]func(*TenantProfile) sortKey{
		"createdTime": tenantProfilePages.keys["createdTime"],
		"name":        tenantProfilePages.keys["name"],
		"id":          tenantProfilePages.keys["id"],
	},
}

// ListTenantProfiles returns a page of tenant profiles; system administrators only.
func (e *Engine) ListTenantProfiles(ctx context.Context, p *Principal, pl PageLink) (PageData[*TenantProfile], error) {
	return e.pageTenantProfiles(ctx, p, pl, tenantProfilePages)
}

func (e *Engine) pageTenantProfiles(ctx context.Context, p *Principal, pl PageLink, spec pageSpec[*TenantProfile]) (PageData[*TenantProfile], error) {
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
	return makePage(all, pl, spec)
}

// DeleteTenantProfile deletes a tenant profile that is neither the default nor
// used by a tenant; system administrators only. The profile is marked Deleting
// first, so a tenant save that gives it to a tenant meanwhile either is seen
// here (and the deletion refused) or sees the mark and takes itself back
// (checkTenantProfileKept).
func (e *Engine) DeleteTenantProfile(ctx context.Context, p *Principal, id uuid.UUID) error {
	if err := requireRole(p, SysAdmin); err != nil {
		return err
	}
	deletion := newDeletionID()
	if err := e.markTenantProfileDeleting(ctx, id, deletion, true); err != nil {
		return err
	}
	used, err := e.tenantProfileInUse(ctx, id)
	if err == nil && used {
		err = errTenantProfileInUse
	}
	if err == nil {
		err = markHeld[tenantProfileRecord](ctx, e, kindTenantProfile, id, deletion)
	}
	if err != nil {
		// Not deleted after all: tenants may use it again.
		if uerr := e.markTenantProfileDeleting(ctx, id, deletion, false); uerr != nil && !errors.Is(uerr, ErrNotFound) {
			return errors.Join(err, uerr)
		}
		return err
	}
	return notFound(e.deleteRecord(ctx, kindTenantProfile, id))
}

// tenantProfileInUse is whether a tenant has the profile.
func (e *Engine) tenantProfileInUse(ctx context.Context, id uuid.UUID) (bool, error) {
	tenants, err := listRecords[Tenant](ctx, e, kindTenant, uuid.Nil)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(tenants, func(t *Tenant) bool {
		return t.TenantProfileID != nil && t.TenantProfileID.ID == id
	}), nil
}

// markTenantProfileDeleting sets or takes back the mark of a deletion of a
// profile, over its latest version. Setting it refuses the default profile and
// one becoming the default.
func (e *Engine) markTenantProfileDeleting(ctx context.Context, id uuid.UUID, deletion string, deleting bool) error {
	for range maxReplaceTries {
		r, prev, err := e.loadTenantProfile(ctx, id)
		if err != nil {
			return notFound(err)
		}
		if deleting && (r.Default || r.Promoting) {
			return errTenantProfileDelDefault
		}
		if !r.setMark(deletion, deleting, e.now()) {
			return nil
		}
		err = e.writeTenantProfile(ctx, r, &prev)
		if errors.Is(err, storage.ErrChanged) {
			continue
		}
		return notFound(err)
	}
	return errChangedMeanwhile
}

// usableTenantProfile is whether a stored profile may be given to a tenant: it
// exists and no deletion of it is under way.
func (e *Engine) usableTenantProfile(ctx context.Context, id uuid.UUID) (bool, error) {
	r, _, err := e.loadTenantProfile(ctx, id)
	if errors.Is(err, storage.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !r.marked(e.now()), nil
}

// GetTenantProfileInfo returns {"id","name"} of a tenant profile; system
// administrators only.
func (e *Engine) GetTenantProfileInfo(ctx context.Context, p *Principal, id uuid.UUID) (*EntityInfo, error) {
	tp, err := e.GetTenantProfile(ctx, p, id)
	if err != nil {
		return nil, err
	}
	return &EntityInfo{ID: tp.ID, Name: tp.Name}, nil
}

// ListTenantProfileInfos returns a page of tenant profiles in their
// {"id","name"} form; system administrators only.
func (e *Engine) ListTenantProfileInfos(ctx context.Context, p *Principal, pl PageLink) (PageData[*EntityInfo], error) {
	page, err := e.pageTenantProfiles(ctx, p, pl, tenantProfileInfoPages)
	if err != nil {
		return PageData[*EntityInfo]{}, err
	}
	out := PageData[*EntityInfo]{Data: make([]*EntityInfo, len(page.Data)),
		TotalPages: page.TotalPages, TotalElements: page.TotalElements, HasNext: page.HasNext}
	for i, tp := range page.Data {
		out.Data[i] = &EntityInfo{ID: tp.ID, Name: tp.Name}
	}
	return out, nil
}
