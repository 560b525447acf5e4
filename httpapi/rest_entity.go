package httpapi

import (
	"strconv"
	"strings"

	"github.com/fasthttp/router"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// entityRoutes registers the REST paths for devices, credentials, device profiles,
// tenants, customers and users. Role and tenant checks live in the engine.
func (s *Server) entityRoutes(r *router.Router) {
	r.POST("/api/device", s.authed(s.saveDevice))
	r.POST("/api/device-with-credentials", s.authed(s.saveDeviceWithCredentials))
	r.GET("/api/device/{deviceId}", s.authed(s.getDevice))
	r.GET("/api/device/info/{deviceId}", s.authed(s.getDeviceInfo))
	r.GET("/api/device/types", s.authed(s.deviceTypes))
	r.GET("/api/devices", s.authed(byStrictIDs(s, "deviceIds", s.eng.DevicesByIDs)))
	r.DELETE("/api/device/{deviceId}", s.authed(s.deleteDevice))
	r.GET("/api/device/{deviceId}/credentials", s.authed(s.getDeviceCredentials))
	r.POST("/api/device/credentials", s.authed(s.saveDeviceCredentials))
	r.GET("/api/tenant/devices", s.authed(s.tenantDevices))
	r.GET("/api/tenant/device", s.authed(s.tenantDevice))
	r.GET("/api/tenant/deviceInfos", s.authed(s.tenantDeviceInfos))
	r.GET("/api/customer/{customerId}/deviceInfos", s.authed(s.customerDeviceInfos))

	r.GET("/api/deviceProfileInfo/default", s.authed(s.defaultProfileInfo))
	r.GET("/api/deviceProfileInfo/{deviceProfileId}", s.authed(s.deviceProfileInfo))
	r.GET("/api/deviceProfileInfos", s.authed(pageOrIDs(s, s.deviceProfileInfos, "deviceProfileIds", s.eng.DeviceProfileInfosByIDs)))
	r.GET("/api/deviceProfileInfos/list", s.authed(byIDs(s, "deviceProfileIds", s.eng.DeviceProfileInfosByIDs)))
	r.POST("/api/deviceProfile/{deviceProfileId}/default", s.authed(s.setDefaultDeviceProfile))
	r.POST("/api/deviceProfile", s.authed(s.saveDeviceProfile))
	r.GET("/api/deviceProfile/{deviceProfileId}", s.authed(s.getDeviceProfile))
	r.DELETE("/api/deviceProfile/{deviceProfileId}", s.authed(s.deleteDeviceProfile))
	r.GET("/api/deviceProfiles", s.authed(s.deviceProfiles))

	r.POST("/api/tenant", s.authed(s.saveTenant))
	r.GET("/api/tenant/{tenantId}", s.authed(s.getTenant))
	r.DELETE("/api/tenant/{tenantId}", s.authed(s.deleteTenant))
	r.GET("/api/tenants", s.authed(pageOrIDs(s, s.tenants, "tenantIds", s.eng.TenantsByIDs)))
	r.GET("/api/tenants/list", s.authed(byIDs(s, "tenantIds", s.eng.TenantsByIDs)))
	r.GET("/api/tenant/{tenantId}/users", s.authed(s.tenantAdmins))
	r.GET("/api/tenant/customers", s.authed(s.tenantCustomer))

	r.POST("/api/customer", s.authed(s.saveCustomer))
	r.GET("/api/customer/{customerId}", s.authed(s.getCustomer))
	r.GET("/api/customer/{customerId}/title", s.authed(s.customerTitle))
	r.GET("/api/customer/{customerId}/shortInfo", s.authed(s.customerShortInfo))
	r.DELETE("/api/customer/{customerId}", s.authed(s.deleteCustomer))
	r.GET("/api/customers", s.authed(pageOrIDs(s, s.customers, "customerIds", s.eng.CustomersByIDs)))
	r.GET("/api/customers/list", s.authed(byIDs(s, "customerIds", s.eng.CustomersByIDs)))
	r.GET("/api/customer/{customerId}/users", s.authed(s.customerUsers))
	r.GET("/api/customer/{customerId}/devices", s.authed(s.customerDevices))
	r.POST("/api/customer/{customerId}/device/{deviceId}", s.authed(s.assignDevice))
	r.POST("/api/customer/public/device/{deviceId}", s.authed(s.assignDeviceToPublic))
	r.DELETE("/api/customer/device/{deviceId}", s.authed(s.unassignDevice))

	r.POST("/api/user", s.authed(s.saveUser))
	r.GET("/api/user/{userId}", s.authed(s.getUser))
	r.GET("/api/users", s.authed(pageOrIDs(s, s.users, "userIds", s.eng.UsersByIDs)))
	r.GET("/api/users/list", s.authed(byIDs(s, "userIds", s.eng.UsersByIDs)))
	r.DELETE("/api/user/{userId}", s.authed(s.deleteUser))
	r.GET("/api/user/{userId}/activationLink", s.authed(s.activationLink))
	r.POST("/api/user/{userId}/userCredentialsEnabled", s.authed(s.setUserCredentialsEnabled))
}

func (s *Server) saveDevice(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	names, ok := nameConflict(ctx)
	if !ok {
		return
	}
	var d engine.Device
	if !s.readJSON(ctx, &d) {
		return
	}
	v, err := s.eng.SaveDeviceWithPolicy(s.ctx, p, &d, string(ctx.QueryArgs().Peek("accessToken")), names)
	s.respond(ctx, v, err)
}

func (s *Server) saveDeviceWithCredentials(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	names, ok := nameConflict(ctx)
	if !ok {
		return
	}
	var req struct {
		Device      *engine.Device            `json:"device"`
		Credentials *engine.DeviceCredentials `json:"credentials"`
	}
	if s.readJSON(ctx, &req) {
		v, err := s.eng.SaveDeviceWithCredentials(s.ctx, p, req.Device, req.Credentials, names)
		s.respond(ctx, v, err)
	}
}

// nameConflict reads ThingsBoard's nameConflictPolicy (FAIL, UNIQUIFY),
// uniquifySeparator and uniquifyStrategy (RANDOM, INCREMENTAL).
func nameConflict(ctx *fasthttp.RequestCtx) (engine.NameConflict, bool) {
	args := ctx.QueryArgs()
	var nc engine.NameConflict
	for _, p := range []struct {
		name, no, yes string
		dst           *bool
	}{
		{"nameConflictPolicy", "FAIL", "UNIQUIFY", &nc.Uniquify},
		{"uniquifyStrategy", "RANDOM", "INCREMENTAL", &nc.Incremental},
	} {
		switch v := string(args.Peek(p.name)); v {
		case "", p.no:
		case p.yes:
			*p.dst = true
		default:
			writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
				"Invalid "+p.name+": "+v+" (expected "+p.no+" or "+p.yes+")")
			return nc, false
		}
	}
	nc.Separator = string(args.Peek("uniquifySeparator"))
	return nc, true
}

func (s *Server) getDeviceInfo(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "deviceId"); ok {
		v, err := s.eng.GetDeviceInfo(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) deviceTypes(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	v, err := s.eng.DeviceTypes(s.ctx, p)
	s.respond(ctx, v, err)
}

func (s *Server) tenantDeviceInfos(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	pl, ok := pageLink(ctx)
	if !ok {
		return
	}
	if f, ok := s.deviceFilter(ctx); ok {
		v, err := s.eng.ListTenantDeviceInfos(s.ctx, p, pl, f)
		s.respond(ctx, v, err)
	}
}

func (s *Server) customerDeviceInfos(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "customerId")
	if !ok {
		return
	}
	pl, ok := pageLink(ctx)
	if !ok {
		return
	}
	if f, ok := s.deviceFilter(ctx); ok {
		v, err := s.eng.ListCustomerDeviceInfos(s.ctx, p, id, pl, f)
		s.respond(ctx, v, err)
	}
}

// deviceFilter reads the filters of the device info lists: type,
// deviceProfileId and active (a Boolean as Spring reads one). As in
// ThingsBoard's DeviceController, a blank type is no filter and with a type
// deviceProfileId is ignored, not even parsed.
func (s *Server) deviceFilter(ctx *fasthttp.RequestCtx) (engine.DeviceFilter, bool) {
	args := ctx.QueryArgs()
	f := engine.DeviceFilter{Type: string(args.Peek("type"))}
	if raw := string(args.Peek("deviceProfileId")); raw != "" && strings.TrimSpace(f.Type) == "" {
		id, err := engine.ParseID(raw)
		if err != nil {
			s.fail(ctx, err)
			return f, false
		}
		f.ProfileID = id
	}
	if raw := string(args.Peek("active")); raw != "" {
		var active bool
		switch strings.ToLower(raw) {
		case "true", "on", "yes", "1":
			active = true
		case "false", "off", "no", "0":
		default:
			writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Invalid active: "+raw)
			return f, false
		}
		f.Active = &active
	}
	return f, true
}

func (s *Server) getDevice(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "deviceId"); ok {
		v, err := s.eng.GetDeviceByID(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) deleteDevice(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "deviceId"); ok {
		s.done(ctx, s.eng.DeleteDevice(s.ctx, p, id))
	}
}

func (s *Server) getDeviceCredentials(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "deviceId"); ok {
		v, err := s.eng.GetDeviceCredentials(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) saveDeviceCredentials(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	var c engine.DeviceCredentials
	if s.readJSON(ctx, &c) {
		v, err := s.eng.SaveDeviceCredentials(s.ctx, p, &c)
		s.respond(ctx, v, err)
	}
}

// tenantDevices is a page of devices, or with deviceName the one device of that
// name (ThingsBoard maps both to this path).
func (s *Server) tenantDevices(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	args := ctx.QueryArgs()
	if args.Has("deviceName") {
		v, err := s.eng.TenantDeviceByName(s.ctx, p, string(args.Peek("deviceName")))
		s.respond(ctx, v, err)
		return
	}
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListTenantDevices(s.ctx, p, pl, string(args.Peek("type")))
		s.respond(ctx, v, err)
	}
}

func (s *Server) tenantDevice(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if name, ok := requiredParam(ctx, "deviceName"); ok {
		v, err := s.eng.TenantDeviceByName(s.ctx, p, name)
		s.respond(ctx, v, err)
	}
}

func (s *Server) defaultProfileInfo(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	v, err := s.eng.GetDefaultProfileInfo(s.ctx, p)
	s.respond(ctx, v, err)
}

func (s *Server) deviceProfileInfo(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "deviceProfileId"); ok {
		v, err := s.eng.GetDeviceProfileInfo(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

// deviceProfileInfos is a page of profile infos, optionally of one transportType.
func (s *Server) deviceProfileInfos(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListDeviceProfileInfos(s.ctx, p, pl, string(ctx.QueryArgs().Peek("transportType")))
		s.respond(ctx, v, err)
	}
}

func (s *Server) setDefaultDeviceProfile(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "deviceProfileId"); ok {
		v, err := s.eng.SetDefaultDeviceProfile(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) saveDeviceProfile(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	var dp engine.DeviceProfile
	if s.readJSON(ctx, &dp) {
		v, err := s.eng.SaveDeviceProfile(s.ctx, p, &dp)
		s.respond(ctx, v, err)
	}
}

func (s *Server) getDeviceProfile(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "deviceProfileId"); ok {
		v, err := s.eng.GetDeviceProfile(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) deleteDeviceProfile(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "deviceProfileId"); ok {
		s.done(ctx, s.eng.DeleteDeviceProfile(s.ctx, p, id))
	}
}

func (s *Server) deviceProfiles(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListDeviceProfiles(s.ctx, p, pl)
		s.respond(ctx, v, err)
	}
}

func (s *Server) saveTenant(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	var t engine.Tenant
	if s.readJSON(ctx, &t) {
		v, err := s.eng.SaveTenant(s.ctx, p, &t)
		s.respond(ctx, v, err)
	}
}

func (s *Server) getTenant(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "tenantId"); ok {
		v, err := s.eng.GetTenant(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) tenants(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListTenants(s.ctx, p, pl)
		s.respond(ctx, v, err)
	}
}

// saveCustomer creates or updates a customer; nameConflictPolicy,
// uniquifySeparator and uniquifyStrategy apply to its title as to a device's
// name (ThingsBoard's CustomerController.saveCustomer).
func (s *Server) saveCustomer(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	names, ok := nameConflict(ctx)
	if !ok {
		return
	}
	var c engine.Customer
	if s.readJSON(ctx, &c) {
		v, err := s.eng.SaveCustomerWithPolicy(s.ctx, p, &c, names)
		s.respond(ctx, v, err)
	}
}

func (s *Server) getCustomer(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "customerId"); ok {
		v, err := s.eng.GetCustomer(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) customers(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListCustomers(s.ctx, p, pl)
		s.respond(ctx, v, err)
	}
}

// saveUser creates or updates a user. sendActivationMail is accepted and ignored:
// Sluice sends no mail, GET /api/user/{userId}/activationLink gives the link.
func (s *Server) saveUser(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	var u engine.User
	if s.readJSON(ctx, &u) {
		v, err := s.eng.SaveUser(s.ctx, p, &u)
		s.respond(ctx, v, err)
	}
}

// respond answers an engine result: the value as JSON, or the error.
func (s *Server) respond(ctx *fasthttp.RequestCtx, v any, err error) {
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, v)
}

// done answers 200 with an empty body, or the error.
func (s *Server) done(ctx *fasthttp.RequestCtx, err error) {
	if err != nil {
		s.fail(ctx, err)
	}
}

// pathID parses the path parameter name as an id; a bad one is a 400.
func (s *Server) pathID(ctx *fasthttp.RequestCtx, name string) (uuid.UUID, bool) {
	id, err := engine.ParseID(pathParam(ctx, name))
	if err != nil {
		s.fail(ctx, err)
		return uuid.Nil, false
	}
	return id, true
}

// requiredParam returns a query parameter that must be present.
func requiredParam(ctx *fasthttp.RequestCtx, name string) (string, bool) {
	args := ctx.QueryArgs()
	if !args.Has(name) {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
			"Required request parameter '"+name+"' for method parameter type String is not present")
		return "", false
	}
	return string(args.Peek(name)), true
}

// pageLink reads pageSize and page (both required, as in ThingsBoard), textSearch,
// sortProperty and sortOrder; the engine checks their values.
func pageLink(ctx *fasthttp.RequestCtx) (engine.PageLink, bool) {
	var pl engine.PageLink
	for _, p := range []struct {
		name string
		dst  *int
	}{{"pageSize", &pl.PageSize}, {"page", &pl.Page}} {
		raw, ok := requiredIntParam(ctx, p.name)
		if !ok {
			return pl, false
		}
		*p.dst = raw
	}
	args := ctx.QueryArgs()
	pl.TextSearch = string(args.Peek("textSearch"))
	pl.SortProperty = string(args.Peek("sortProperty"))
	pl.SortOrder = string(args.Peek("sortOrder"))
	return pl, true
}

func requiredIntParam(ctx *fasthttp.RequestCtx, name string) (int, bool) {
	args := ctx.QueryArgs()
	if !args.Has(name) {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
			"Required request parameter '"+name+"' for method parameter type int is not present")
		return 0, false
	}
	raw := string(args.Peek(name))
	n, err := strconv.ParseInt(raw, 10, 32) // a Java int
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
			"Failed to convert value of type 'java.lang.String' to required type 'int'; For input string: \""+raw+"\"")
		return 0, false
	}
	return int(n), true
}
