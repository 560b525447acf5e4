package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/bytedance/sonic"
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/codec"
	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/kv"
)

// claimRoutes registers device claiming: device-side claim and customer claim/unclaim (compat §3).
func (s *Server) claimRoutes(r *router.Router) {
	r.POST("/api/v1/{token}/claim", s.postClaim)
	r.POST("/api/customer/device/{deviceName}/claim", s.authed(s.claimDevice))
	r.DELETE("/api/customer/device/{deviceName}/claim", s.authed(s.reclaimDevice))
}

// postClaim is POST /api/v1/{token}/claim: 200 empty when the claiming window is
// open (or already was), 400 with the reason when the device cannot be claimed.
func (s *Server) postClaim(ctx *fasthttp.RequestCtx) {
	dev, ok := s.device(ctx)
	if !ok {
		return
	}
	s.withBody(ctx, s.maxBodySize(), func(body []byte) {
		req, err := parseClaimRequest(body, s.cfg.Limits)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		s.done(ctx, s.eng.RegisterClaim(s.ctx, dev, req.SecretKey, req.DurationMs))
	})
}

// claimDevice is POST /api/customer/device/{deviceName}/claim: 200
// {"device","response":"SUCCESS"}, or 400 with the JSON string "FAILURE" or
// "CLAIMED" as ThingsBoard answers.
func (s *Server) claimDevice(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	name := pathParam(ctx, "deviceName") // decoded: device names often hold spaces
	s.withBody(ctx, s.maxBodySize(), func(body []byte) {
		req, err := parseClaimRequest(body, s.cfg.Limits)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		res, err := s.eng.ClaimDevice(s.ctx, p, name, req.SecretKey)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		if res.Response == engine.ClaimSuccess {
			s.writeJSON(ctx, res)
			return
		}
		ctx.SetStatusCode(fasthttp.StatusBadRequest)
		ctx.SetContentType("application/json")
		ctx.SetBody(kv.AppendJSONString(nil, res.Response))
	})
}

// reclaimDevice is DELETE /api/customer/device/{deviceName}/claim: 200 empty.
func (s *Server) reclaimDevice(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	s.done(ctx, s.eng.ReclaimDevice(s.ctx, p, pathParam(ctx, "deviceName")))
}

// claimRequest is the body of both claim requests; the customer side uses only
// SecretKey.
type claimRequest struct {
	SecretKey  string
	DurationMs int64
}

// parseClaimRequest reads {"secretKey":"..","durationMs":N}. An empty body, null,
// and absent or null fields mean the defaults ("" and 0: the configured
// duration). secretKey may also be a number or boolean and durationMs a numeric
// string, as ThingsBoard's lenient reader takes them; anything else is a 400.
func parseClaimRequest(body []byte, lim codec.Limits) (claimRequest, error) {
	var req claimRequest
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return req, nil
	}
	var raw map[string]json.RawMessage
	if err := decodeJSON(body, &raw, lim); err != nil {
		return req, errClaimBody("the body must be a JSON object")
	}
	if v, ok := raw["secretKey"]; ok {
		key, ok := claimSecret(v)
		if !ok {
			return req, errClaimBody("secretKey must be a string")
		}
		req.SecretKey = key
	}
	if v, ok := raw["durationMs"]; ok {
		ms, ok := claimDuration(v)
		if !ok {
			return req, errClaimBody("durationMs must be an integer number of milliseconds")
		}
		req.DurationMs = ms
	}
	return req, nil
}

func errClaimBody(why string) error {
	return engine.Errorf(engine.CodeBadRequestParams, "Invalid claim request: %s", why)
}

// claimSecret reads a secretKey value: a string, null, or a number or boolean
// taken as its text.
func claimSecret(v json.RawMessage) (string, bool) {
	switch {
	case string(v) == "null":
		return "", true
	case len(v) > 0 && v[0] == '"':
		var s string
		err := sonic.Unmarshal(v, &s)
		return s, err == nil
	case string(v) == "true", string(v) == "false":
		return string(v), true
	case len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9'):
		return string(v), true
	}
	return "", false
}

// claimDuration reads a durationMs value: an integer (6e4 too), a string
// holding an integer, or null (0). Values past int64 saturate; the engine treats
// ≤ 0 as the configured duration.
func claimDuration(v json.RawMessage) (int64, bool) {
	text := string(v)
	switch {
	case text == "null":
		return 0, true
	case len(text) > 0 && text[0] == '"':
		if err := sonic.UnmarshalString(text, &text); err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
		return n, err == nil
	case len(text) == 0 || text[0] != '-' && (text[0] < '0' || text[0] > '9'):
		return 0, false // not a JSON number: ParseFloat would take "Inf"
	}
	if n, err := strconv.ParseInt(text, 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(text, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange), f != math.Trunc(f):
		return 0, false
	case f >= math.MaxInt64:
		return math.MaxInt64, true
	case f <= math.MinInt64:
		return math.MinInt64, true
	}
	return int64(f), true
}
