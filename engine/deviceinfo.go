package engine

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"
)

// DeviceInfo is a device with what ThingsBoard's device lists show beside it:
// its customer's title, its profile's name and whether it is active now
// (activity.go). Sluice has no public customers, so customerIsPublic is false.
type DeviceInfo struct {
	*Device
	CustomerTitle     *string `json:"customerTitle"` // null when unassigned, as ThingsBoard's
	CustomerIsPublic  bool    `json:"customerIsPublic"`
	DeviceProfileName string  `json:"deviceProfileName"`
	Active            bool    `json:"active"`
}

// DeviceFilter narrows a list of device infos: to one type (profile name), one
// profile, active or inactive devices. Zero values filter nothing, nor does a
// blank Type; with a Type, ProfileID is ignored (ThingsBoard's DeviceController
// uses deviceProfileId only when type is blank).
type DeviceFilter struct {
	Type      string
	ProfileID uuid.UUID
	Active    *bool
}

// GetDeviceInfo is GetDevice with the device's info.
func (e *Engine) GetDeviceInfo(ctx context.Context, p *Principal, id uuid.UUID) (*DeviceInfo, error) {
	d, err := e.GetDevice(ctx, p, id)
	if err != nil {
		return nil, orDeviceNotFound(err, id) // checkDeviceInfoId
	}
	infos, err := e.deviceInfos(ctx, d.TenantID(), []*Device{d})
	if err != nil {
		return nil, err
	}
	return infos[0], nil
}

// ListTenantDeviceInfos is ListTenantDevices with each device's info, filtered
// by f (tenant admins only).
func (e *Engine) ListTenantDeviceInfos(ctx context.Context, p *Principal, pl PageLink, f DeviceFilter) (PageData[*DeviceInfo], error) {
	if err := requireRole(p, TenantAdmin); err != nil {
		return PageData[*DeviceInfo]{}, err
	}
	all, err := listRecords[Device](ctx, e, kindDevice, p.TenantID)
	if err != nil {
		return PageData[*DeviceInfo]{}, err
	}
	return e.deviceInfoPage(ctx, p.TenantID, all, pl, f)
}

// ListCustomerDeviceInfos is ListCustomerDevices with each device's info,
// filtered by f.
func (e *Engine) ListCustomerDeviceInfos(ctx context.Context, p *Principal, customerID uuid.UUID, pl PageLink, f DeviceFilter) (PageData[*DeviceInfo], error) {
	c, err := e.GetCustomer(ctx, p, customerID)
	if err != nil {
		return PageData[*DeviceInfo]{}, err
	}
	all, err := listRecords[Device](ctx, e, kindDevice, c.TenantID.ID)
	if err != nil {
		return PageData[*DeviceInfo]{}, err
	}
	all = slices.DeleteFunc(all, func(d *Device) bool { return d.CustomerID.ID != customerID })
	return e.deviceInfoPage(ctx, c.TenantID.ID, all, pl, f)
}

// deviceInfoPage filters devices by f and cuts the page pl asks for. Only an
// active filter or sort needs every device's state; otherwise only the page's
// devices are looked up. textSearch matches name, label, type and customer
// title, as ThingsBoard's DeviceRepository.findDeviceInfosByFilter (the plain
// device lists match name and label only).
func (e *Engine) deviceInfoPage(ctx context.Context, tenant uuid.UUID, devices []*Device, pl PageLink, f DeviceFilter) (PageData[*DeviceInfo], error) {
	byType := strings.TrimSpace(f.Type) != ""
	devices = slices.DeleteFunc(devices, func(d *Device) bool {
		if byType {
			return d.Type != f.Type
		}
		return f.ProfileID != uuid.Nil && d.DeviceProfileID.ID != f.ProfileID
	})
	if pl.TextSearch != "" {
		var err error
		if devices, err = e.searchDeviceInfos(ctx, tenant, devices, pl.TextSearch); err != nil {
			return PageData[*DeviceInfo]{}, err
		}
		pl.TextSearch = "" // done
	}
	byState := f.Active != nil || pl.SortProperty == "active" || pl.SortProperty == "customerTitle"
	if !byState {
		page, err := makePage(devices, pl, devicePages)
		if err != nil {
			return PageData[*DeviceInfo]{}, err
		}
		infos, err := e.deviceInfos(ctx, tenant, page.Data)
		if err != nil {
			return PageData[*DeviceInfo]{}, err
		}
		return PageData[*DeviceInfo]{Data: infos, TotalPages: page.TotalPages, TotalElements: page.TotalElements, HasNext: page.HasNext}, nil
	}
	infos, err := e.deviceInfos(ctx, tenant, devices)
	if err != nil {
		return PageData[*DeviceInfo]{}, err
	}
	if f.Active != nil {
		infos = slices.DeleteFunc(infos, func(i *DeviceInfo) bool { return i.Active != *f.Active })
	}
	return makePage(infos, pl, deviceInfoPages)
}

// searchDeviceInfos keeps the devices whose name, label, type or customer's
// title contains text, case-insensitively (an unassigned device has no title).
func (e *Engine) searchDeviceInfos(ctx context.Context, tenant uuid.UUID, devices []*Device, text string) ([]*Device, error) {
	var titles map[uuid.UUID]string
	if slices.ContainsFunc(devices, func(d *Device) bool { return !isNull(d.CustomerID.ID) }) {
		customers, err := listRecords[Customer](ctx, e, kindCustomer, tenant)
		if err != nil {
			return nil, err
		}
		titles = make(map[uuid.UUID]string, len(customers))
		for _, c := range customers {
			titles[c.ID.ID] = c.Title
		}
	}
	needle := strings.ToLower(text)
	has := func(s string) bool { return strings.Contains(strings.ToLower(s), needle) }
	return slices.DeleteFunc(devices, func(d *Device) bool {
		title, assigned := titles[d.CustomerID.ID]
		return !has(d.Name) && !has(d.Label) && !has(d.Type) && !(assigned && has(title))
	}), nil
}

// deviceInfoPages sorts and searches device infos as devicePages does devices,
// and by customerTitle and active too.
var deviceInfoPages = func() pageSpec[*DeviceInfo] {
	spec := pageSpec[*DeviceInfo]{
		text: func(i *DeviceInfo) string { return devicePages.text(i.Device) },
		alt:  func(i *DeviceInfo) string { return devicePages.alt(i.Device) },
		keys: map[string]func(*DeviceInfo) sortKey{},
	}
	for name, key := range devicePages.keys {
		spec.keys[name] = func(i *DeviceInfo) sortKey { return key(i.Device) }
	}
	spec.keys["customerTitle"] = func(i *DeviceInfo) sortKey {
		if i.CustomerTitle == nil {
			return nullKey // unassigned
		}
		return strKey(*i.CustomerTitle)
	}
	spec.keys["active"] = func(i *DeviceInfo) sortKey {
		if i.Active {
			return numKey(1)
		}
		return numKey(0)
	}
	return spec
}()

// deviceInfos builds the infos of tenant's devices, in their order.
func (e *Engine) deviceInfos(ctx context.Context, tenant uuid.UUID, devices []*Device) ([]*DeviceInfo, error) {
	titles := map[uuid.UUID]string{}
	for _, d := range devices {
		if !isNull(d.CustomerID.ID) {
			titles[d.CustomerID.ID] = ""
		}
	}
	if len(titles) > 0 {
		customers, err := listRecords[Customer](ctx, e, kindCustomer, tenant)
		if err != nil {
			return nil, err
		}
		for _, c := range customers {
			if _, ok := titles[c.ID.ID]; ok {
				titles[c.ID.ID] = c.Title
			}
		}
	}
	states, err := e.deviceStates(ctx, devices)
	if err != nil {
		return nil, err
	}
	out := make([]*DeviceInfo, len(devices))
	for i, d := range devices {
		out[i] = &DeviceInfo{Device: d, DeviceProfileName: d.Type, Active: states[d.ID.ID].active}
		if t, ok := titles[d.CustomerID.ID]; ok {
			out[i].CustomerTitle = &t
		}
	}
	return out, nil
}

// EntitySubtype is one type of an entity kind in a tenant, as ThingsBoard lists them.
type EntitySubtype struct {
	TenantID   EntityID `json:"tenantId"`
	EntityType string   `json:"entityType"`
	Type       string   `json:"type"`
}

// DeviceTypes lists the types (profile names) the devices of p's tenant have,
// sorted (ThingsBoard's GET /api/device/types).
func (e *Engine) DeviceTypes(ctx context.Context, p *Principal) ([]EntitySubtype, error) {
	if err := requireRole(p, TenantAdmin, CustomerUser); err != nil {
		return nil, err
	}
	all, err := listRecords[Device](ctx, e, kindDevice, p.TenantID)
	if err != nil {
		return nil, err
	}
	types := map[string]bool{}
	for _, d := range all {
		types[d.Type] = true
	}
	out := make([]EntitySubtype, 0, len(types))
	for _, t := range slices.Sorted(maps.Keys(types)) {
		out = append(out, EntitySubtype{TenantID: newEntityID(EntityTenant, p.TenantID), EntityType: EntityDevice, Type: t})
	}
	return out, nil
}
