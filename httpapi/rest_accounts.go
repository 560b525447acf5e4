package httpapi

import (
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// Handlers for deleting tenants and customers, user reads and deletes, activation
// links, customer lists and device assignment (registered in entityRoutes).

func (s *Server) deleteTenant(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "tenantId"); ok {
		s.done(ctx, s.eng.DeleteTenant(s.ctx, p, id))
	}
}

func (s *Server) tenantAdmins(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "tenantId")
	if !ok {
		return
	}
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListTenantAdmins(s.ctx, p, id, pl)
		s.respond(ctx, v, err)
	}
}

func (s *Server) deleteCustomer(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "customerId"); ok {
		s.done(ctx, s.eng.DeleteCustomer(s.ctx, p, id))
	}
}

// customerTitle answers a customer's title as plain text, as ThingsBoard's
// getCustomerTitleById (produces "application/text").
func (s *Server) customerTitle(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "customerId")
	if !ok {
		return
	}
	c, err := s.eng.GetCustomer(s.ctx, p, id)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	ctx.SetContentType("application/text; charset=utf-8")
	ctx.SetBodyString(c.Title)
}

// customerShortInfo is ThingsBoard's getShortCustomerInfoById: the title and
// isPublic, always false (Sluice has no public customers).
func (s *Server) customerShortInfo(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "customerId")
	if !ok {
		return
	}
	c, err := s.eng.GetCustomer(s.ctx, p, id)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, struct {
		Title    string `json:"title"`
		IsPublic bool   `json:"isPublic"`
	}{c.Title, false})
}

// tenantCustomer is ThingsBoard's getTenantCustomer: the customer of the
// tenant with the (required) customerTitle.
func (s *Server) tenantCustomer(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if title, ok := requiredParam(ctx, "customerTitle"); ok {
		v, err := s.eng.TenantCustomerByTitle(s.ctx, p, title)
		s.respond(ctx, v, err)
	}
}

// assignDeviceToPublic answers ThingsBoard's assignDeviceToPublicCustomer
// with a 400: Sluice has no public customer.
func (s *Server) assignDeviceToPublic(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "deviceId"); ok {
		v, err := s.eng.AssignDeviceToPublicCustomer(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) customerUsers(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "customerId")
	if !ok {
		return
	}
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListCustomerUsers(s.ctx, p, id, pl)
		s.respond(ctx, v, err)
	}
}

// users is ThingsBoard's GET /api/users: a page of the tenant's users for a
// tenant admin, of the customer's for a customer user.
func (s *Server) users(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListUsers(s.ctx, p, pl)
		s.respond(ctx, v, err)
	}
}

func (s *Server) customerDevices(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "customerId")
	if !ok {
		return
	}
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListCustomerDevices(s.ctx, p, id, pl, string(ctx.QueryArgs().Peek("type")))
		s.respond(ctx, v, err)
	}
}

func (s *Server) assignDevice(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	customerID, ok := s.pathID(ctx, "customerId")
	if !ok {
		return
	}
	if deviceID, ok := s.pathID(ctx, "deviceId"); ok {
		v, err := s.eng.AssignDevice(s.ctx, p, customerID, deviceID)
		s.respond(ctx, v, err)
	}
}

func (s *Server) unassignDevice(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "deviceId"); ok {
		v, err := s.eng.UnassignDevice(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) getUser(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "userId"); ok {
		v, err := s.eng.GetUser(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) deleteUser(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "userId"); ok {
		s.done(ctx, s.eng.DeleteUser(s.ctx, p, id))
	}
}

// activationLink answers, as text, {base}/api/noauth/activate?activateToken=<token>
// with a new token; base is the scheme and Host of this request.
func (s *Server) activationLink(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "userId")
	if !ok {
		return
	}
	token, err := s.eng.ActivationToken(s.ctx, p, id)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	scheme := "http://"
	if ctx.IsTLS() {
		scheme = "https://"
	}
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString(scheme + string(ctx.Host()) + "/api/noauth/activate?activateToken=" + token)
}

// setUserCredentialsEnabled enables or disables a user's login; the query
// parameter userCredentialsEnabled defaults to true, as in ThingsBoard.
func (s *Server) setUserCredentialsEnabled(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "userId")
	if !ok {
		return
	}
	enabled := true
	switch raw := string(ctx.QueryArgs().Peek("userCredentialsEnabled")); raw {
	case "", "true":
	case "false":
		enabled = false
	default:
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
			"Failed to convert value of type 'java.lang.String' to required type 'boolean'; Invalid boolean value ["+raw+"]")
		return
	}
	s.done(ctx, s.eng.SetUserCredentialsEnabled(s.ctx, p, id, enabled))
}
