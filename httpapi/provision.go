package httpapi

import (
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/kv"
)

// provision is POST /api/v1/provision (compat §1.9): 200 with the outcome
// whenever the request was processed, 400 for a body that is not the request.
func (s *Server) provision(ctx *fasthttp.RequestCtx) {
	var req engine.ProvisionRequest
	if !s.readAnyJSON(ctx, &req) {
		return
	}
	res, err := s.eng.ProvisionDevice(s.ctx, &req)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(appendProvisionResult(make([]byte, 0, 96), res))
}

// appendProvisionResult appends res in ThingsBoard's key order.
func appendProvisionResult(dst []byte, res *engine.ProvisionResult) []byte {
	if res.Status == engine.ProvisionSuccess {
		dst = append(dst, `{"credentialsValue":`...)
		dst = kv.AppendJSONString(dst, res.Token)
		dst = append(dst, `,"credentialsType":"ACCESS_TOKEN"`...)
	} else {
		dst = append(dst, `{"errorMsg":`...)
		dst = kv.AppendJSONString(dst, res.ErrorMsg)
	}
	dst = append(dst, `,"status":`...)
	dst = kv.AppendJSONString(dst, res.Status)
	return append(dst, '}')
}
