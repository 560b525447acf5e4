package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/bytedance/sonic"
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/codec"
	"github.com/sluice-iot/sluice/engine"
)

// maxClientRPCBody is ThingsBoard's payload limit of /api/v1/*/rpc/** (64 KiB).
const maxClientRPCBody = 64 << 10

// ruleRoutes registers client-side RPC: device requests answered by tenant rules (compat §1.7).
func (s *Server) ruleRoutes(r *router.Router) {
	r.POST("/api/v1/{token}/rpc", s.postClientRPC)

	r.POST("/api/rpc/client/rules", s.authed(s.saveRPCRule))
	r.GET("/api/rpc/client/rules", s.authed(s.listRPCRules))
	r.DELETE("/api/rpc/client/rules/{ruleId}", s.authed(s.deleteRPCRule))
}

// postClientRPC is POST /api/v1/{token}/rpc {"method","params"}: 200 with the
// rule's reply (empty when it returned undefined), 404 when no rule answers.
func (s *Server) postClientRPC(ctx *fasthttp.RequestCtx) {
	if len(ctx.PostBody()) > maxClientRPCBody {
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, engine.CodeBadRequestParams,
			"Payload size exceeds the limit of "+itoa(maxClientRPCBody)+" bytes")
		return
	}
	dev, ok := s.device(ctx)
	if !ok {
		return
	}
	s.withBody(ctx, maxClientRPCBody, func(body []byte) {
		method, params, err := parseClientRPC(body, s.cfg.Limits)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		reply, err := s.eng.CallClientRPC(s.ctx, dev, method, params)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		if reply != nil {
			ctx.SetContentType("application/json")
			ctx.SetBody(reply)
		}
	})
}

// parseClientRPC reads {"method":"..","params":any}. method must be a non-empty
// string; params may be any JSON and absent means null (nil). Unknown fields are
// ignored. Nesting and keys per object past lim are refused, as for telemetry.
func parseClientRPC(body []byte, lim codec.Limits) (method string, params []byte, err error) {
	// Strict JSON first, with the limits: sonic lets raw control characters
	// and invalid UTF-8 through in strings, and params go on to a strict
	// JSON.parse. Only what CheckJSON passes is parsed.
	if err := codec.CheckJSON(body, lim); err != nil {
		if ce := (*codec.Error)(nil); errors.As(err, &ce) && ce.Limit {
			return "", nil, errClientRPC(ce.Msg)
		}
		return "", nil, errClientRPC("the body must be a JSON object")
	}
	var req map[string]json.RawMessage
	if sonic.Unmarshal(body, &req) != nil || req == nil {
		return "", nil, errClientRPC("the body must be a JSON object")
	}
	raw, ok := req["method"]
	if !ok || sonic.Unmarshal(raw, &method) != nil || method == "" {
		return "", nil, errClientRPC("method must be a non-empty string")
	}
	if p := bytes.TrimSpace(req["params"]); len(p) > 0 && string(p) != "null" {
		params = p
	}
	return method, params, nil
}

func errClientRPC(why string) error {
	return engine.Errorf(engine.CodeBadRequestParams, "Invalid client-side RPC request: %s", why)
}

// saveRPCRule is POST /api/rpc/client/rules: creates the rule of (method,
// deviceProfileId) or replaces its script; answers the rule.
func (s *Server) saveRPCRule(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	var in engine.RPCRuleInput
	if !s.readJSON(ctx, &in) {
		return
	}
	rule, err := s.eng.SaveRPCRule(s.ctx, p, &in)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, rule)
}

// listRPCRules is GET /api/rpc/client/rules: every rule of the tenant.
func (s *Server) listRPCRules(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	rules, err := s.eng.ListRPCRules(s.ctx, p)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, rules)
}

// deleteRPCRule is DELETE /api/rpc/client/rules/{ruleId}: 200 empty.
func (s *Server) deleteRPCRule(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "ruleId"); ok {
		s.done(ctx, s.eng.DeleteRPCRule(s.ctx, p, id))
	}
}
