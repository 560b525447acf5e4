package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

var errTenantTitleBlank = &Error{Code: CodeBadRequestParams, Msg: "Tenant title should be specified!"}

// SaveTenant creates (zero ID) or updates a tenant; system administrators only. A
// new tenant gets its default device profile.
func (e *Engine) SaveTenant(ctx context.Context, p *Principal, in *Tenant) (*Tenant, error) {
	if err := requireRole(p, SysAdmin); err != nil {
		return nil, err
	}
	if in.ID.ID != uuid.Nil {
		old, prev, err := loadRecord[Tenant](ctx, e, kindTenant, in.ID.ID)
		if err != nil {
			return nil, notFound(err)
		}
		if err := staleVersion("Tenant", in.Version, old.Version); err != nil {
			return nil, err
		}
		t := *in
		t.ID, t.CreatedTime, t.Version = old.ID, old.CreatedTime, old.Version+1 // the stored id, whatever entityType the client sent
		// Over the version read: a tenant deleted meanwhile is not brought
		// back (its sweep would then find it and leave what it owns).
		return e.writeTenant(ctx, &t, old, &prev)
	}
	return e.createTenant(ctx, newID(), in)
}

// createTenant stores a new tenant under id and its default profile.
func (e *Engine) createTenant(ctx context.Context, id uuid.UUID, in *Tenant) (*Tenant, error) {
	t := *in
	t.ID = newEntityID(EntityTenant, id)
	t.CreatedTime, t.Version = e.now().UnixMilli(), 1
	if _, err := e.writeTenant(ctx, &t, nil, nil); err != nil {
		return nil, err
	}
	if _, err := e.defaultProfile(ctx, id); err != nil {
		return nil, err
	}
	return &t, nil
}

// writeTenant checks and stores t: new with Put, or over old, read as *prev,
// whose errors are those of changedOrGone.
func (e *Engine) writeTenant(ctx context.Context, t, old *Tenant, prev *[]byte) (*Tenant, error) {
	if strings.TrimSpace(t.Title) == "" {
		return nil, errTenantTitleBlank
	}
	if err := checkLengths("title", t.Title); err != nil {
		return nil, err
	}
	if err := checkAdditionalInfo(t.AdditionalInfo); err != nil {
		return nil, err
	}
	if t.Email != "" {
		if err := checkEmail(t.Email); err != nil {
			return nil, err
		}
	}
	t.Name = t.Title
	if t.Region == "" {
		t.Region = "Global"
	}
	profile, err := e.tenantProfileIDFor(ctx, t.TenantProfileID)
	if err != nil {
		return nil, err
	}
	t.TenantProfileID = profile
	// Tenants are system-level records: owner uuid.Nil.
	if err := e.writeRecord(ctx, kindTenant, t.ID.ID, uuid.Nil, prev, t, nil); err != nil {
		if prev != nil {
			return nil, changedOrGone(err)
		}
		return nil, err
	}
	if old == nil || old.TenantProfileID == nil || old.TenantProfileID.ID != profile.ID {
		if err := e.checkTenantProfileKept(ctx, t, old); err != nil {
			return nil, err
		}
	}
	e.evictLimitsEverywhere(t.ID.ID) // its profile may have changed
	return t, nil
}

// checkTenantProfileKept runs after tenant t was written with a profile its
// previous version old (nil: a new tenant) did not have. If a deletion of that
// profile has begun meanwhile (see DeleteTenantProfile), the write is taken
// back and the save refused as if the profile were gone: a new tenant is
// deleted (nothing refers to it yet), an updated one gets old's profile back
// unless another write has moved it off the profile already.
func (e *Engine) checkTenantProfileKept(ctx context.Context, t, old *Tenant) error {
	ok, err := e.usableTenantProfile(ctx, t.TenantProfileID.ID)
	if err != nil || ok {
		return err
	}
	if old == nil {
		if err := e.deleteRecord(ctx, kindTenant, t.ID.ID); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		return errTenantProfileMissing
	}
	for range maxReplaceTries {
		cur, prev, err := loadRecord[Tenant](ctx, e, kindTenant, t.ID.ID)
		if errors.Is(err, storage.ErrNotFound) {
			return errTenantProfileMissing
		}
		if err != nil {
			return err
		}
		if cur.TenantProfileID == nil || cur.TenantProfileID.ID != t.TenantProfileID.ID {
			return errTenantProfileMissing // moved off it already
		}
		cur.TenantProfileID = old.TenantProfileID
		cur.Version++
		err = e.replaceRecord(ctx, kindTenant, cur.ID.ID, uuid.Nil, prev, cur)
		switch {
		case errors.Is(err, storage.ErrChanged):
			continue
		case errors.Is(err, storage.ErrNotFound):
			return errTenantProfileMissing
		case err != nil:
			return err
		}
		e.evictLimitsEverywhere(t.ID.ID)
		return errTenantProfileMissing
	}
	return errChangedMeanwhile
}

// GetTenant returns a tenant to a system administrator, or its own tenant to a
// tenant admin.
func (e *Engine) GetTenant(ctx context.Context, p *Principal, id uuid.UUID) (*Tenant, error) {
	if err := requireRole(p, SysAdmin, TenantAdmin); err != nil {
		return nil, err
	}
	t, err := getRecord[Tenant](ctx, e, kindTenant, id)
	if err != nil {
		return nil, notFound(err)
	}
	if p.Authority == TenantAdmin && t.ID.ID != p.TenantID {
		return nil, ErrPermissionDenied
	}
	return t, nil
}

// ListTenants returns a page of all tenants; system administrators only.
func (e *Engine) ListTenants(ctx context.Context, p *Principal, pl PageLink) (PageData[*Tenant], error) {
	if err := requireRole(p, SysAdmin); err != nil {
		return PageData[*Tenant]{}, err
	}
	all, err := listRecords[Tenant](ctx, e, kindTenant, uuid.Nil)
	if err != nil {
		return PageData[*Tenant]{}, err
	}
	return makePage(all, pl, tenantPages)
}

// DeleteTenant deletes a tenant and everything it owns (system administrators
// only): devices with their credentials, telemetry and attributes, users with
// their API keys, customers, device profiles, the tenant's own data. Device tokens,
// JWTs and API keys of the tenant are refused from then on. The tenant record goes
// last, so an interrupted delete can be repeated.
func (e *Engine) DeleteTenant(ctx context.Context, p *Principal, id uuid.UUID) error {
	if err := requireRole(p, SysAdmin); err != nil {
		return err
	}
	if _, err := getRecord[Tenant](ctx, e, kindTenant, id); err != nil {
		return notFound(err)
	}
	if err := e.removeTenant(ctx, id); err != nil {
		return err
	}
	e.sweepLater(sweep{tenant: true, id: id})
	return nil
}

// removeTenant deletes everything tenant id owns, then its record.
func (e *Engine) removeTenant(ctx context.Context, id uuid.UUID) error {
	devices, err := listRecords[Device](ctx, e, kindDevice, id)
	if err != nil {
		return err
	}
	for _, d := range devices {
		if err := e.removeDevice(ctx, d.ID.ID); err != nil {
			return err
		}
	}
	users, err := listRecords[User](ctx, e, kindUser, id)
	if err != nil {
		return err
	}
	for _, u := range users {
		if err := e.removeUser(ctx, u); err != nil {
			return err
		}
	}
	if err := e.removeOwned(ctx, id, kindAPIKey, kindUserCreds); err != nil {
		return err
	}
	customers, err := listRecords[Customer](ctx, e, kindCustomer, id)
	if err != nil {
		return err
	}
	for _, c := range customers {
		if err := e.removeCustomer(ctx, c); err != nil {
			return err
		}
	}
	if err := e.removeOtaPackages(ctx, id); err != nil {
		return err
	}
	if err := e.removeOwned(ctx, id, kindProfile, kindRPCRule, kindView); err != nil {
		return err
	}
	if err := e.removeEntityData(ctx, id); err != nil {
		return err
	}
	return notFound(e.deleteRecord(ctx, kindTenant, id))
}

// removeOwned deletes every record of kinds owned by owner (leftovers of
// interrupted deletes and kinds without side effects).
func (e *Engine) removeOwned(ctx context.Context, owner uuid.UUID, kinds ...string) error {
	for _, kind := range kinds {
		rs, err := e.store.List(ctx, kind, owner)
		if err != nil {
			return fmt.Errorf("cannot list %s of %s: %w", kind, owner, err)
		}
		for _, r := range rs {
			if err := e.deleteRecord(ctx, kind, r.ID); err != nil && !errors.Is(err, storage.ErrNotFound) {
				return err
			}
			if kind == kindAPIKey {
				if k, err := decodeRecord[apiKeyRecord](r); err == nil {
					e.evictAPIKeyEverywhere(k.Hash)
				}
			}
			if kind == kindUserCreds {
				e.evictUserEverywhere(r.ID)
			}
		}
	}
	return nil
}
