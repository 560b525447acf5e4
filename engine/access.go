package engine

import (
	"context"
	"errors"
	"slices"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

// Principal is the authenticated caller of the REST API. TenantID is NullUUID for
// the system administrator, CustomerID is NullUUID unless Authority is CUSTOMER_USER.
type Principal struct {
	UserID     uuid.UUID
	TenantID   uuid.UUID
	CustomerID uuid.UUID
	Authority  string
	Email      string
}

var (
	errSysAdminNotAllowed     = &Error{Code: CodePermissionDenied, Msg: "System administrator is not allowed to perform this operation!"}
	errCustomerUserNotAllowed = &Error{Code: CodePermissionDenied, Msg: "Customer user is not allowed to perform this operation!"}
	errUnsupportedEntityType  = &Error{Code: CodeBadRequestParams, Msg: "Unsupported entity type"}
	errDeviceIDNotFound       = &Error{Code: CodeItemNotFound, Msg: "Device with requested id wasn't found!"}
	errTenantIDNotFound       = &Error{Code: CodeItemNotFound, Msg: "Tenant with requested id wasn't found!"}
	errCustomerIDNotFound     = &Error{Code: CodeItemNotFound, Msg: "Customer with requested id wasn't found!"}
)

// requireRole fails with ErrPermissionDenied unless p has one of roles, as
// ThingsBoard's @PreAuthorize does.
func requireRole(p *Principal, roles ...string) error {
	if p == nil {
		return ErrAuthFailed
	}
	if !slices.Contains(roles, p.Authority) {
		return ErrPermissionDenied
	}
	return nil
}

// AuthorizeEntity checks that p may read (or, with write, change) the telemetry and
// attributes of the entity and returns the tenant that owns it. Entity types are
// DEVICE, TENANT and CUSTOMER. The system administrator reaches any tenant's own
// attributes and telemetry and nothing else (compat §7.8; ThingsBoard's
// AccessValidator.validateTenant); a tenant admin reaches only its tenant's
// entities; a customer user only its own customer and that customer's devices,
// and may not write its customer's data.
func (e *Engine) AuthorizeEntity(ctx context.Context, p *Principal, entityType string, id uuid.UUID, write bool) (uuid.UUID, error) {
	if p == nil {
		return uuid.Nil, ErrAuthFailed
	}
	switch entityType {
	case EntityDevice, EntityTenant, EntityCustomer:
	default:
		return uuid.Nil, errUnsupportedEntityType
	}
	if p.Authority == SysAdmin && entityType != EntityTenant {
		return uuid.Nil, errSysAdminNotAllowed
	}
	if p.Authority != TenantAdmin && p.Authority != CustomerUser && p.Authority != SysAdmin {
		return uuid.Nil, ErrPermissionDenied
	}
	switch entityType {
	case EntityDevice:
		d, err := e.loadDevice(ctx, id)
		if err != nil {
			return uuid.Nil, ifNotFound(err, errDeviceIDNotFound)
		}
		if !e.canSeeDevice(p, d) {
			return uuid.Nil, ErrPermissionDenied
		}
		return d.TenantID(), nil
	case EntityTenant:
		if p.Authority == CustomerUser {
			return uuid.Nil, errCustomerUserNotAllowed
		}
		t, err := getRecord[Tenant](ctx, e, kindTenant, id)
		if err != nil {
			return uuid.Nil, ifNotFound(err, errTenantIDNotFound)
		}
		if t.ID.ID != p.TenantID && p.Authority != SysAdmin {
			return uuid.Nil, ErrPermissionDenied
		}
		// ThingsBoard's TenantAdminPermissions give a tenant admin only
		// READ_ATTRIBUTES and READ_TELEMETRY on its tenant: the tenant's data
		// is the system administrator's to write.
		if write && p.Authority != SysAdmin {
			return uuid.Nil, ErrPermissionDenied
		}
		return t.ID.ID, nil
	default: // EntityCustomer
		c, err := getRecord[Customer](ctx, e, kindCustomer, id)
		if err != nil {
			return uuid.Nil, ifNotFound(err, errCustomerIDNotFound)
		}
		if c.TenantID.ID != p.TenantID {
			return uuid.Nil, ErrPermissionDenied
		}
		// ThingsBoard lets a customer user read its own customer, never write it.
		if p.Authority == CustomerUser && (c.ID.ID != p.CustomerID || write) {
			return uuid.Nil, ErrPermissionDenied
		}
		return c.TenantID.ID, nil
	}
}

// canSeeDevice: a tenant admin sees its tenant's devices, a customer user those
// assigned to its customer.
func (e *Engine) canSeeDevice(p *Principal, d *Device) bool {
	if d.TenantID() != p.TenantID {
		return false
	}
	switch p.Authority {
	case TenantAdmin:
		return true
	case CustomerUser:
		return d.CustomerID.ID == p.CustomerID && !isNull(p.CustomerID)
	}
	return false
}

// ifNotFound returns nf when err is storage.ErrNotFound, err otherwise.
func ifNotFound(err error, nf *Error) error {
	if errors.Is(err, storage.ErrNotFound) {
		return nf
	}
	return err
}
