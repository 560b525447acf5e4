package engine

import (
	"context"
	"errors"
	"strings"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/storage"
)

var (
	errCustomerTitleBlank = &Error{Code: CodeBadRequestParams, Msg: "Customer title should be specified!"}
	errCustomerTitleTaken = &Error{Code: CodeBadRequestParams, Msg: "Customer with such title already exists!"}
)

// SaveCustomer creates (zero ID) or updates a customer of p's tenant; tenant admins
// only. Titles are unique within a tenant.
func (e *Engine) SaveCustomer(ctx context.Context, p *Principal, in *Customer) (*Customer, error) {
	return e.SaveCustomerWithPolicy(ctx, p, in, NameConflict{})
}

// SaveCustomerWithPolicy is SaveCustomer that resolves a title another
// customer of the tenant has as names says, as devices' names
// (SaveDeviceWithPolicy; ThingsBoard's CustomerServiceImpl.saveCustomer).
func (e *Engine) SaveCustomerWithPolicy(ctx context.Context, p *Principal, in *Customer, names NameConflict) (*Customer, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	c := in
	for try := 0; ; try++ {
		v, err := e.saveCustomer(ctx, p, c)
		if err != errCustomerTitleTaken || !names.Uniquify || try == maxUniquifyTries {
			return v, err
		}
		title, err := e.uniqueCustomerTitle(ctx, p.TenantID, in, names)
		if err != nil {
			return nil, err
		}
		renamed := *in
		renamed.Title = title
		c = &renamed
	}
}

// uniqueCustomerTitle is in's title with a suffix that no other customer of
// tenant has (uniqueName).
func (e *Engine) uniqueCustomerTitle(ctx context.Context, tenant uuid.UUID, in *Customer, names NameConflict) (string, error) {
	all, err := listRecords[Customer](ctx, e, kindCustomer, tenant)
	if err != nil {
		return "", err
	}
	taken := make(map[string]bool, len(all))
	for _, o := range all {
		if o.ID.ID != in.ID.ID {
			taken[o.Title] = true
		}
	}
	return uniqueName(in.Title, taken, names), nil
}

// saveCustomer is SaveCustomer after the role check.
func (e *Engine) saveCustomer(ctx context.Context, p *Principal, in *Customer) (*Customer, error) {
	c := *in
	if in.ID.ID != uuid.Nil {
		old, prev, err := loadRecord[Customer](ctx, e, kindCustomer, in.ID.ID)
		if err != nil {
			return nil, orCustomerNotFound(err, in.ID.ID) // checkEntity's checkCustomerId
		}
		if old.TenantID.ID != p.TenantID {
			return nil, ErrPermissionDenied
		}
		if err := staleVersion("Customer", in.Version, old.Version); err != nil {
			return nil, err
		}
		// The stored id, not the client's: its entityType may be anything.
		c.ID, c.CreatedTime, c.Version = old.ID, old.CreatedTime, old.Version+1
		c.TenantID = old.TenantID
		// Over the version read: a customer deleted meanwhile is not brought back.
		return e.writeCustomer(ctx, &c, &prev)
	}
	if err := e.checkEntityLimit(ctx, p.TenantID, customerLimit); err != nil {
		return nil, err // maxCustomers of the tenant's profile
	}
	return e.createCustomer(ctx, p.TenantID, newID(), &c)
}

// createCustomer stores a new customer of tenant under id.
func (e *Engine) createCustomer(ctx context.Context, tenant, id uuid.UUID, in *Customer) (*Customer, error) {
	c := *in
	c.ID = newEntityID(EntityCustomer, id)
	c.TenantID = newEntityID(EntityTenant, tenant)
	c.CreatedTime, c.Version = e.now().UnixMilli(), 1
	return e.writeCustomer(ctx, &c, nil)
}

// writeCustomer checks and stores c: with Put, or over the version read as
// *prev, whose errors are those of changedOrGone.
func (e *Engine) writeCustomer(ctx context.Context, c *Customer, prev *[]byte) (*Customer, error) {
	if strings.TrimSpace(c.Title) == "" {
		return nil, errCustomerTitleBlank
	}
	if err := checkLengths("title", c.Title); err != nil {
		return nil, err
	}
	if err := checkAdditionalInfo(c.AdditionalInfo); err != nil {
		return nil, err
	}
	if c.Email != "" {
		// Contact details, not a login: checked as ThingsBoard checks them.
		if err := checkEmail(c.Email); err != nil {
			return nil, err
		}
	}
	c.Name = c.Title
	err := e.writeRecord(ctx, kindCustomer, c.ID.ID, c.TenantID.ID, prev, c, []string{customerTitleKey(c.TenantID.ID, c.Title)})
	switch {
	case errors.Is(err, storage.ErrConflict):
		return nil, errCustomerTitleTaken
	case err != nil && prev != nil:
		return nil, changedOrGone(err)
	case err != nil:
		return nil, err
	}
	return c, nil
}

// GetCustomer returns a customer of p's tenant to a tenant admin, or its own
// customer to a customer user. An unknown id is "Customer with id [<id>] is
// not found" (ThingsBoard's checkCustomerId), ErrNotFound to errors.Is.
func (e *Engine) GetCustomer(ctx context.Context, p *Principal, id uuid.UUID) (*Customer, error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	c, err := getRecord[Customer](ctx, e, kindCustomer, id)
	if err != nil {
		return nil, orCustomerNotFound(err, id)
	}
	if c.TenantID.ID != p.TenantID || (p.Authority == CustomerUser && c.ID.ID != p.CustomerID) {
		return nil, ErrPermissionDenied
	}
	return c, nil
}

// TenantCustomerByTitle returns the customer of p's tenant with that title
// (tenant admins only), as ThingsBoard's GET /api/tenant/customers?customerTitle=.
func (e *Engine) TenantCustomerByTitle(ctx context.Context, p *Principal, title string) (*Customer, error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return nil, err
	}
	c, err := lookupRecord[Customer](ctx, e, kindCustomer, customerTitleKey(p.TenantID, title))
	if err != nil {
		return nil, ifNotFound(err, Errorf(CodeItemNotFound, "Customer with title [%s] is not found", title))
	}
	return c, nil
}

// ListCustomers returns a page of the customers of p's tenant; tenant admins only.
func (e *Engine) ListCustomers(ctx context.Context, p *Principal, pl PageLink) (PageData[*Customer], error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return PageData[*Customer]{}, err
	}
	all, err := listRecords[Customer](ctx, e, kindCustomer, p.TenantID)
	if err != nil {
		return PageData[*Customer]{}, err
	}
	return makePage(all, pl, customerPages)
}

// DeleteCustomer deletes a customer of p's tenant (tenant admins only) with its
// users and their API keys, its attributes and telemetry; its devices become
// unassigned.
func (e *Engine) DeleteCustomer(ctx context.Context, p *Principal, id uuid.UUID) error {
	if err := requireRole(p, TenantAdmin); err != nil {
		return err
	}
	c, err := e.GetCustomer(ctx, p, id)
	if err != nil {
		return err
	}
	return e.removeCustomer(ctx, c)
}

// removeCustomer unassigns the customer's devices, deletes its users, data and
// record; the record goes last so an interrupted delete can be repeated. An
// assignment to it (a claim, on another node too) racing the deletion is
// undone: by the second pass over the devices after the record is gone, or,
// written after that pass, by the assignment itself (putDeviceCustomer).
func (e *Engine) removeCustomer(ctx context.Context, c *Customer) error {
	tenant := c.TenantID.ID
	if err := e.unassignAll(ctx, tenant, c.ID.ID); err != nil {
		return err
	}
	users, err := listRecords[User](ctx, e, kindUser, tenant)
	if err != nil {
		return err
	}
	for _, u := range users {
		if u.CustomerID.ID == c.ID.ID {
			if err := e.removeUser(ctx, u); err != nil {
				return err
			}
		}
	}
	if err := e.removeEntityData(ctx, c.ID.ID); err != nil {
		return err
	}
	if err := notFound(e.deleteRecord(ctx, kindCustomer, c.ID.ID)); err != nil {
		return err
	}
	return e.unassignAll(ctx, tenant, c.ID.ID)
}

// unassignAll unassigns the devices of tenant assigned to customer.
func (e *Engine) unassignAll(ctx context.Context, tenant, customer uuid.UUID) error {
	devices, err := listRecords[Device](ctx, e, kindDevice, tenant)
	if err != nil {
		return err
	}
	for _, d := range devices {
		if d.CustomerID.ID == customer {
			if _, err := e.putDeviceCustomer(ctx, d.ID.ID, newEntityID(EntityCustomer, NullUUID), stillAssignedTo(customer)); err != nil &&
				!errors.Is(err, storage.ErrNotFound) && !errors.Is(err, errNotAssignedThere) { // deleted or reassigned meanwhile
				return err
			}
		}
	}
	return nil
}
