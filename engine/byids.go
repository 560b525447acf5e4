package engine

import (
	"context"
	"errors"

	"github.com/google/uuid"
)

// ThingsBoard's "by ids" reads (GET /api/users?userIds=, /api/customers?customerIds=,
// /api/tenants?tenantIds=, /api/deviceProfileInfos?deviceProfileIds=,
// /api/tenantProfiles?ids=, /api/devices?deviceIds= and their /list forms) answer
// the entities found that the caller may read, and leave the others out.

// byIDs returns what get gives for each of ids, in ids' order and each id once,
// leaving out those get does not find or p may not read. Check p's role
// before: a role that may read none of them is 403, not an empty list.
func byIDs[T any](ctx context.Context, ids []uuid.UUID, get func(context.Context, uuid.UUID) (T, error)) ([]T, error) {
	out := make([]T, 0, len(ids))
	seen := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		v, err := get(ctx, id)
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrPermissionDenied) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// DevicesByIDs returns the devices of ids that p can see.
func (e *Engine) DevicesByIDs(ctx context.Context, p *Principal, ids []uuid.UUID) ([]*Device, error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	return byIDs(ctx, ids, func(ctx context.Context, id uuid.UUID) (*Device, error) { return e.GetDevice(ctx, p, id) })
}

// UsersByIDs returns the users of ids that p may read; tenant admins and
// customer users.
func (e *Engine) UsersByIDs(ctx context.Context, p *Principal, ids []uuid.UUID) ([]*User, error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	return byIDs(ctx, ids, func(ctx context.Context, id uuid.UUID) (*User, error) { return e.GetUser(ctx, p, id) })
}

// CustomersByIDs returns the customers of ids of p's tenant; tenant admins only.
func (e *Engine) CustomersByIDs(ctx context.Context, p *Principal, ids []uuid.UUID) ([]*Customer, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	return byIDs(ctx, ids, func(ctx context.Context, id uuid.UUID) (*Customer, error) { return e.GetCustomer(ctx, p, id) })
}

// TenantsByIDs returns the tenants of ids that p may read: any to a system
// administrator, its own to a tenant admin.
func (e *Engine) TenantsByIDs(ctx context.Context, p *Principal, ids []uuid.UUID) ([]*Tenant, error) {
	if err := requireRole(p, SysAdmin, TenantAdmin); err != nil {
		return nil, err
	}
	return byIDs(ctx, ids, func(ctx context.Context, id uuid.UUID) (*Tenant, error) { return e.GetTenant(ctx, p, id) })
}

// DeviceProfileInfosByIDs returns the short forms of the device profiles of ids
// of p's tenant; tenant admins only, as ThingsBoard.
func (e *Engine) DeviceProfileInfosByIDs(ctx context.Context, p *Principal, ids []uuid.UUID) ([]*DeviceProfileInfo, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	return byIDs(ctx, ids, func(ctx context.Context, id uuid.UUID) (*DeviceProfileInfo, error) {
		return e.GetDeviceProfileInfo(ctx, p, id)
	})
}

// TenantProfilesByIDs returns the tenant profiles of ids; system administrators only.
func (e *Engine) TenantProfilesByIDs(ctx context.Context, p *Principal, ids []uuid.UUID) ([]*TenantProfile, error) {
	if err := requireRole(p, SysAdmin); err != nil {
		return nil, err
	}
	return byIDs(ctx, ids, func(ctx context.Context, id uuid.UUID) (*TenantProfile, error) {
		return e.GetTenantProfile(ctx, p, id)
	})
}
