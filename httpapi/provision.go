package httpapi

import (
	"errors"
	"strings"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/kv"
)

// provisionBody is the provision request as ThingsBoard reads it (Gson's
// getAsString and getAsBoolean): a number or boolean where a string is
// expected is its text, and "true" (any case) is a true gateway flag.
type provisionBody struct {
	DeviceName            jsonText `json:"deviceName"`
	ProvisionDeviceKey    jsonText `json:"provisionDeviceKey"`
	ProvisionDeviceSecret jsonText `json:"provisionDeviceSecret"`
	CredentialsType       jsonText `json:"credentialsType"`
	Token                 jsonText `json:"token"`
	Gateway               jsonText `json:"gateway"`
}

// jsonText is a JSON string, number or boolean as text; null or absent is
// unset.
type jsonText struct {
	text string
	set  bool
}

func (t *jsonText) UnmarshalJSON(b []byte) error {
	switch {
	case string(b) == "null":
		*t = jsonText{}
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := sonic.Unmarshal(b, &s); err != nil {
			return err
		}
		*t = jsonText{s, true}
		return nil
	case len(b) > 0 && (b[0] == '-' || b[0] >= '0' && b[0] <= '9' || b[0] == 't' || b[0] == 'f'):
		*t = jsonText{string(b), true}
		return nil
	}
	return errors.New("an object or array where a string is expected")
}

// provision is POST /api/v1/provision (compat §1.9): 200 with the outcome
// whenever the request was processed, 400 for a body that is not the request
// (ThingsBoard's 500: the Sluice decision for wrong-shape JSON), naming a
// missing provisionDeviceKey or provisionDeviceSecret as ThingsBoard does.
func (s *Server) provision(ctx *fasthttp.RequestCtx) {
	var body provisionBody
	if !s.readAnyJSON(ctx, &body) {
		return
	}
	for _, f := range []struct {
		name string
		v    jsonText
	}{{"provisionDeviceKey", body.ProvisionDeviceKey}, {"provisionDeviceSecret", body.ProvisionDeviceSecret}} {
		if !f.v.set {
			writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Failed to find the field "+f.name+" in JSON body!")
			return
		}
	}
	req := engine.ProvisionRequest{
		ProvisionDeviceKey:    body.ProvisionDeviceKey.text,
		ProvisionDeviceSecret: body.ProvisionDeviceSecret.text,
		CredentialsType:       body.CredentialsType.text,
		Token:                 body.Token.text,
		Gateway:               strings.EqualFold(body.Gateway.text, "true"),
	}
	if body.DeviceName.set {
		req.DeviceName = &body.DeviceName.text
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
