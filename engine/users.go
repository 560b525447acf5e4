package engine

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

var (
	errUserEmailBlank    = &Error{Code: CodeBadRequestParams, Msg: "User email should be specified!"}
	errUserNoAuthority   = &Error{Code: CodeBadRequestParams, Msg: "User authority isn't defined!"}
	errUserBadTenant     = &Error{Code: CodeBadRequestParams, Msg: "User is referencing to non-existent tenant!"}
	errUserBadCustomer   = &Error{Code: CodeBadRequestParams, Msg: "User is referencing to non-existent customer!"}
	errUserNoTenantGiven = &Error{Code: CodeBadRequestParams, Msg: "Tenant administrator should be assigned to tenant!"}
)

// SaveUser creates (zero ID) or updates a user within p's reach. A new user cannot
// log in before it is activated (see ActivationToken).
// A system administrator manages system administrators and tenant admins of any
// tenant; a tenant admin manages tenant admins and customer users of its tenant;
// a customer user may update itself only (ThingsBoard's CustomerUserPermissions).
// On update only the e-mail, names, phone and additionalInfo change.
func (e *Engine) SaveUser(ctx context.Context, p *Principal, in *User) (*User, error) {
	if err := requireRole(p, SysAdmin, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	if p.Authority == CustomerUser && in.ID.ID != p.UserID {
		return nil, ErrPermissionDenied
	}
	if err := checkEmail(in.Email); err != nil {
		return nil, err
	}
	if err := checkUserFields(in); err != nil {
		return nil, err
	}
	if in.ID.ID != uuid.Nil {
		old, prev, err := loadRecord[User](ctx, e, kindUser, in.ID.ID)
		if err != nil {
			return nil, notFound(err)
		}
		if !canManageUser(p, old) && old.ID.ID != p.UserID {
			return nil, ErrPermissionDenied
		}
		if err := staleVersion("User", in.Version, old.Version); err != nil {
			return nil, err
		}
		u := *old
		u.Email, u.FirstName, u.LastName, u.Phone, u.AdditionalInfo = in.Email, in.FirstName, in.LastName, in.Phone, in.AdditionalInfo
		u.Version++
		// Over the version read: a user deleted meanwhile is not brought back.
		if err := e.writeUser(ctx, &u, &prev); err != nil {
			return nil, changedOrGone(err)
		}
		e.evictUserEverywhere(u.ID.ID)
		return &u, nil
	}
	u := *in
	if err := e.placeNewUser(ctx, p, &u); err != nil {
		return nil, err
	}
	// maxUsers of the user's tenant's profile, whoever creates it; system
	// administrators have no tenant.
	if err := e.checkEntityLimit(ctx, u.TenantID.ID, userLimit); err != nil {
		return nil, err
	}
	return e.createUser(ctx, &u, "")
}

// placeNewUser sets the tenant and customer of a user p creates and checks p may.
func (e *Engine) placeNewUser(ctx context.Context, p *Principal, u *User) error {
	switch u.Authority {
	case "":
		return errUserNoAuthority
	case SysAdmin, TenantAdmin, CustomerUser:
	default:
		return Errorf(CodeBadRequestParams, "Invalid authority: %s", u.Authority)
	}
	switch {
	case p.Authority == SysAdmin && u.Authority == SysAdmin:
		u.TenantID, u.CustomerID = newEntityID(EntityTenant, NullUUID), newEntityID(EntityCustomer, NullUUID)
	case p.Authority == SysAdmin && u.Authority == TenantAdmin:
		if isNull(u.TenantID.ID) {
			return errUserNoTenantGiven
		}
		if _, err := getRecord[Tenant](ctx, e, kindTenant, u.TenantID.ID); err != nil {
			return ifNotFound(err, errUserBadTenant)
		}
		u.TenantID.EntityType, u.CustomerID = EntityTenant, newEntityID(EntityCustomer, NullUUID)
	case p.Authority == TenantAdmin && u.Authority == TenantAdmin:
		u.TenantID, u.CustomerID = newEntityID(EntityTenant, p.TenantID), newEntityID(EntityCustomer, NullUUID)
	case p.Authority == TenantAdmin && u.Authority == CustomerUser:
		if isNull(u.CustomerID.ID) {
			return errUserBadCustomer
		}
		c, err := getRecord[Customer](ctx, e, kindCustomer, u.CustomerID.ID)
		if err != nil {
			return ifNotFound(err, errUserBadCustomer)
		}
		if c.TenantID.ID != p.TenantID {
			return ErrPermissionDenied
		}
		u.TenantID, u.CustomerID = c.TenantID, c.ID
	default:
		return ErrPermissionDenied
	}
	return nil
}

// canManageUser reports whether p may change an existing user.
func canManageUser(p *Principal, u *User) bool {
	switch p.Authority {
	case SysAdmin:
		return u.Authority == SysAdmin || u.Authority == TenantAdmin
	case TenantAdmin:
		return u.TenantID.ID == p.TenantID && (u.Authority == TenantAdmin || u.Authority == CustomerUser)
	}
	return false
}

// checkUserFields refuses names and a phone longer than ThingsBoard's @Length
// (255): the names are copied into every access token, and a long one makes
// tokens that no longer fit in a request header.
func checkUserFields(u *User) error {
	if err := checkLengths("first name", u.FirstName, "last name", u.LastName, "phone", u.Phone); err != nil {
		return err
	}
	return checkAdditionalInfo(u.AdditionalInfo)
}

// checkEmail is a plain shape check; delivery proves the rest.
func checkEmail(email string) error {
	if strings.TrimSpace(email) == "" {
		return errUserEmailBlank
	}
	local, domain, ok := strings.Cut(email, "@")
	if !ok || local == "" || domain == "" || strings.ContainsFunc(email, func(r rune) bool { return r == ' ' || isControl(r) }) ||
		strings.Contains(domain, "@") {
		return Errorf(CodeBadRequestParams, "Invalid email address format '%s'!", email)
	}
	return checkLengths("email", email)
}

// createUser stores a new user and its credentials. With a password the user is
// enabled; without one it waits for activation. The user goes first: an
// interrupted create leaves a user that cannot log in, never credentials without a user.
func (e *Engine) createUser(ctx context.Context, in *User, password string) (*User, error) {
	u := *in
	u.ID = newEntityID(EntityUser, newID())
	u.CreatedTime, u.Version = e.now().UnixMilli(), 1
	if err := e.putUser(ctx, &u); err != nil {
		return nil, err
	}
	if err := e.putUserCredentials(ctx, &u, password); err != nil {
		return nil, errors.Join(err, e.deleteRecord(ctx, kindUser, u.ID.ID))
	}
	return &u, nil
}

func (e *Engine) putUser(ctx context.Context, u *User) error { return e.writeUser(ctx, u, nil) }

// writeUser stores u: with Put, or over the version read as *prev.
func (e *Engine) writeUser(ctx context.Context, u *User, prev *[]byte) error {
	u.Name = u.Email
	u.TenantID.ID, u.CustomerID.ID = orNull(u.TenantID.ID), orNull(u.CustomerID.ID)
	err := e.writeRecord(ctx, kindUser, u.ID.ID, u.TenantID.ID, prev, u, []string{emailKey(u.Email)})
	if errors.Is(err, storage.ErrConflict) {
		return Errorf(CodeBadRequestParams, "User with email '%s' already present in database!", u.Email)
	}
	return err
}

// putUserCredentials sets the password of u; an empty password leaves the user
// disabled until activated.
func (e *Engine) putUserCredentials(ctx context.Context, u *User, password string) error {
	c := userCredentials{UserID: u.ID.ID, TenantID: u.TenantID.ID}
	if password != "" {
		h, err := e.hashPassword(password)
		if err != nil {
			return err
		}
		c.PasswordHash, c.Enabled = h, true
	}
	return e.putCreds(ctx, &c)
}

// canReadUser: every user reads itself, and managers read whom they manage.
func canReadUser(p *Principal, u *User) bool {
	return u.ID.ID == p.UserID || canManageUser(p, u) || sameCustomer(p, u)
}

// sameCustomer: a customer user reads the other users of its customer, as
// ThingsBoard's CustomerUserPermissions let it.
func sameCustomer(p *Principal, u *User) bool {
	return p.Authority == CustomerUser && u.Authority == CustomerUser && u.TenantID.ID == p.TenantID &&
		!isNull(p.CustomerID) && u.CustomerID.ID == p.CustomerID
}

// GetUser returns a user p may read: itself, or one it manages (see SaveUser).
func (e *Engine) GetUser(ctx context.Context, p *Principal, id uuid.UUID) (*User, error) {
	if err := requireRole(p, SysAdmin, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	u, err := getRecord[User](ctx, e, kindUser, id)
	if err != nil {
		return nil, notFound(err)
	}
	if !canReadUser(p, u) {
		return nil, ErrPermissionDenied
	}
	return u, nil
}

// managedUser returns a user p manages (see SaveUser): a system or tenant
// administrator's to delete, enable or disable.
func (e *Engine) managedUser(ctx context.Context, p *Principal, id uuid.UUID) (*User, error) {
	if err := requireRole(p, SysAdmin, TenantAdmin); err != nil {
		return nil, err
	}
	u, err := getRecord[User](ctx, e, kindUser, id)
	if err != nil {
		return nil, notFound(err)
	}
	if !canManageUser(p, u) {
		return nil, ErrPermissionDenied
	}
	return u, nil
}

var errSysadminSelfDelete = &Error{Code: CodePermissionDenied, Msg: "Sysadmin is not allowed to delete himself"}

// DeleteUser removes a user p manages with its credentials and API keys; its
// tokens and keys are refused from then on.
func (e *Engine) DeleteUser(ctx context.Context, p *Principal, id uuid.UUID) error {
	u, err := e.managedUser(ctx, p, id)
	if err != nil {
		return err
	}
	if p.Authority == SysAdmin && id == p.UserID {
		return errSysadminSelfDelete
	}
	return e.removeUser(ctx, u)
}

var errSysadminSelfDisable = &Error{Code: CodePermissionDenied, Msg: "Sysadmin is not allowed to disable himself"}

// SetUserCredentialsEnabled enables or disables the login of a user p manages
// (ThingsBoard's POST /api/user/{userId}/userCredentialsEnabled). A disabled
// user cannot log in, refresh, or use its tokens or API keys ("User account is
// not active"). Disabling also outdates every token issued so far, as
// ThingsBoard's UserCredentialsInvalidationEvent does, so enabling the user
// again does not bring them back: it logs in anew. Its API keys, which are
// not tokens, work again. ThingsBoard lets a system administrator disable
// itself; Sluice refuses it, as it refuses deleting itself, since the last
// one would lock every administrator out.
func (e *Engine) SetUserCredentialsEnabled(ctx context.Context, p *Principal, id uuid.UUID, enabled bool) error {
	if _, err := e.managedUser(ctx, p, id); err != nil {
		return err
	}
	if p.Authority == SysAdmin && id == p.UserID && !enabled {
		return errSysadminSelfDisable
	}
	return e.updateCreds(ctx, id, func(c *userCredentials) error {
		if !enabled && c.Enabled {
			c.outdateTokens(e.now().Unix())
		}
		c.Enabled, c.Disabled = enabled, !enabled
		return nil
	})
}

// removeUser deletes u's API keys, credentials and record, in that order, so an
// interrupted delete leaves a user that can be deleted again.
func (e *Engine) removeUser(ctx context.Context, u *User) error {
	keys, err := listRecords[apiKeyRecord](ctx, e, kindAPIKey, orNull(u.TenantID.ID))
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.UserID.ID == u.ID.ID {
			if err := e.removeAPIKey(ctx, k); err != nil {
				return err
			}
		}
	}
	if err := e.deleteRecord(ctx, kindUserCreds, u.ID.ID); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	e.evictUserEverywhere(u.ID.ID)
	if err := e.deleteRecord(ctx, kindUser, u.ID.ID); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	e.evictUserEverywhere(u.ID.ID)
	return nil
}

// ListTenantAdmins returns a page of the tenant administrators of a tenant: to a
// system administrator for any tenant, to a tenant admin for its own.
func (e *Engine) ListTenantAdmins(ctx context.Context, p *Principal, tenantID uuid.UUID, pl PageLink) (PageData[*User], error) {
	if err := requireRole(p, SysAdmin, TenantAdmin); err != nil {
		return PageData[*User]{}, err
	}
	if _, err := getRecord[Tenant](ctx, e, kindTenant, tenantID); err != nil {
		return PageData[*User]{}, notFound(err)
	}
	if p.Authority == TenantAdmin && tenantID != p.TenantID {
		return PageData[*User]{}, ErrPermissionDenied
	}
	return e.pageUsers(ctx, tenantID, pl, func(u *User) bool { return u.Authority == TenantAdmin })
}

// ListCustomerUsers returns a page of the users of a customer of p's tenant
// (tenant admins only).
func (e *Engine) ListCustomerUsers(ctx context.Context, p *Principal, customerID uuid.UUID, pl PageLink) (PageData[*User], error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return PageData[*User]{}, err
	}
	c, err := e.GetCustomer(ctx, p, customerID)
	if err != nil {
		return PageData[*User]{}, err
	}
	return e.pageUsers(ctx, c.TenantID.ID, pl, func(u *User) bool {
		return u.Authority == CustomerUser && u.CustomerID.ID == customerID
	})
}

// ListUsers returns a page of the users p's scope holds (ThingsBoard's GET
// /api/users): a tenant admin's tenant, a customer user's customer.
func (e *Engine) ListUsers(ctx context.Context, p *Principal, pl PageLink) (PageData[*User], error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return PageData[*User]{}, err
	}
	if p.Authority == TenantAdmin {
		return e.pageUsers(ctx, p.TenantID, pl, func(*User) bool { return true })
	}
	return e.pageUsers(ctx, p.TenantID, pl, func(u *User) bool { return sameCustomer(p, u) })
}

func (e *Engine) pageUsers(ctx context.Context, tenant uuid.UUID, pl PageLink, keep func(*User) bool) (PageData[*User], error) {
	all, err := listRecords[User](ctx, e, kindUser, tenant)
	if err != nil {
		return PageData[*User]{}, err
	}
	all = slices.DeleteFunc(all, func(u *User) bool { return !keep(u) })
	return makePage(all, pl, userPages)
}
