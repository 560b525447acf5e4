package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/fasthttp/router"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// maxRPCReply is the largest device reply to an RPC (ThingsBoard's
// transport.http.max_payload_size for /api/v1/*/rpc/**).
const maxRPCReply = 64 << 10

// rpcRoutes registers server-side RPC: REST calls to devices, the device's RPC poll and replies, persistent RPC (compat §2).
func (s *Server) rpcRoutes(r *router.Router) {
	r.GET("/api/v1/{token}/rpc", s.getRPCRequest)
	r.POST("/api/v1/{token}/rpc/{requestId}", s.postRPCReply)

	r.POST("/api/rpc/oneway/{deviceId}", s.authed(s.callRPC(true, false)))
	r.POST("/api/rpc/twoway/{deviceId}", s.authed(s.callRPC(false, false)))
	r.POST("/api/plugins/rpc/oneway/{deviceId}", s.authed(s.callRPC(true, true)))
	r.POST("/api/plugins/rpc/twoway/{deviceId}", s.authed(s.callRPC(false, true)))

	r.GET("/api/rpc/persistent/{rpcId}", s.authed(s.getPersistentRPC))
	r.DELETE("/api/rpc/persistent/{rpcId}", s.authed(s.deletePersistentRPC))
	r.GET("/api/rpc/persistent/device/{deviceId}", s.authed(s.persistentRPCs))
}

// getRPCRequest is the device's RPC long poll (compat §1.5): 200 with the oldest
// pending RPC, 408 with an empty body at timeout.
func (s *Server) getRPCRequest(ctx *fasthttp.RequestCtx) {
	timeout, ok := s.pollTimeout(ctx)
	if !ok {
		return
	}
	dev, ok := s.device(ctx)
	if !ok {
		return
	}
	wctx, stop := s.untilHangup(ctx)
	defer stop()
	body, ok, err := s.eng.WaitRPC(wctx, dev.UUID(), pathParam(ctx, "token"), timeout)
	s.answerPoll(ctx, body, ok, hungUp(wctx, err))
}

// errNoReplyBody answers a reply without a body, as Spring answers
// ThingsBoard's required @RequestBody String before the controller runs (so
// before the token is checked).
var errNoReplyBody = &engine.Error{Code: engine.CodeBadRequestParams, Msg: "Required request body is missing"}

// postRPCReply takes the device's reply to RPC {requestId} (compat §1.6): 200 with
// an empty body, also for a stale id.
func (s *Server) postRPCReply(ctx *fasthttp.RequestCtx) {
	raw := pathParam(ctx, "requestId")
	id, err := strconv.ParseInt(raw, 10, 32) // ThingsBoard binds an Integer
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
			"Failed to convert value of type 'java.lang.String' to required type 'java.lang.Integer'; For input string: \""+raw+"\"")
		return
	}
	if len(ctx.PostBody()) > maxRPCReply {
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, engine.CodeBadRequestParams,
			"Payload size exceeds the limit of "+itoa(maxRPCReply)+" bytes")
		return
	}
	if len(ctx.PostBody()) == 0 {
		s.fail(ctx, errNoReplyBody)
		return
	}
	dev, ok := s.device(ctx)
	if !ok {
		return
	}
	s.withBody(ctx, maxRPCReply, func(body []byte) {
		if len(body) == 0 { // compressed nothing
			s.fail(ctx, errNoReplyBody)
			return
		}
		s.done(ctx, s.eng.ReplyRPC(s.ctx, dev.UUID(), id, body))
	})
}

// callRPC sends a server-side RPC and answers its outcome (compat §2). The wait
// uses s.polls, so a node shutting down ends it with 503.
func (s *Server) callRPC(oneway, v1 bool) func(*fasthttp.RequestCtx, *engine.Principal) {
	return func(ctx *fasthttp.RequestCtx, p *engine.Principal) {
		id, ok := s.pathID(ctx, "deviceId")
		if !ok {
			return
		}
		var body rpcBody
		if !s.readJSON(ctx, &body) {
			return
		}
		req, ok := body.request()
		if !ok {
			writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Invalid request body")
			return
		}
		// A caller that hangs up ends the wait: its RPC is dropped.
		wctx, stop := s.untilHangup(ctx)
		defer stop()
		res, err := s.eng.CallRPC(wctx, p, id, oneway, &req)
		if err = hungUp(wctx, err); err != nil {
			if errors.Is(err, errHungUp) {
				ctx.SetStatusCode(fasthttp.StatusRequestTimeout) // no one reads it
				return
			}
			if errors.Is(err, context.Canceled) {
				writeError(ctx, fasthttp.StatusServiceUnavailable, engine.CodeUnavailable, "Node is shutting down, retry")
				return
			}
			s.fail(ctx, err)
			return
		}
		s.answerRPC(ctx, res, v1)
	}
}

// rpcBody is a REST RPC request as ThingsBoard reads it, through Jackson's
// asLong, asInt and asBoolean: a number or boolean may come as a string
// ("timeout":"5000", "persistent":"true"), a number may have a fraction or an
// exponent (1e4, truncated). Text that is no number or boolean is a 400 here,
// where Jackson would read 0 or false. requestUUID, when present, must be a
// UUID (ThingsBoard's UUID.fromString, 400 otherwise) and becomes the RPC id.
type rpcBody struct {
	Method         jsonText        `json:"method"`
	Params         json.RawMessage `json:"params"`
	Timeout        jsonText        `json:"timeout"`
	ExpirationTime jsonText        `json:"expirationTime"`
	Persistent     jsonText        `json:"persistent"`
	Retries        jsonText        `json:"retries"`
	AdditionalInfo json.RawMessage `json:"additionalInfo"`
	RequestUUID    json.RawMessage `json:"requestUUID"`
}

func (b *rpcBody) request() (engine.RPCRequest, bool) {
	req := engine.RPCRequest{Method: b.Method.text, Params: b.Params, AdditionalInfo: b.AdditionalInfo}
	ok := true
	if len(b.RequestUUID) > 0 {
		// Only a string can hold a UUID: Jackson's asText of null, a number or
		// a boolean never parses.
		var text string
		if err := json.Unmarshal(b.RequestUUID, &text); err != nil {
			return req, false
		}
		id, err := engine.ParseID(text)
		if err != nil || id == uuid.Nil {
			return req, false
		}
		req.ID = id
	}
	long := func(t jsonText, bits int) *int64 {
		if !t.set {
			return nil
		}
		n, good := lenientInt(t.text, bits)
		ok = ok && good
		return &n
	}
	req.Timeout, req.ExpirationTime = long(b.Timeout, 64), long(b.ExpirationTime, 64)
	if r := long(b.Retries, 32); r != nil {
		n := int(*r)
		req.Retries = &n
	}
	if b.Persistent.set {
		switch v := strings.TrimSpace(b.Persistent.text); v {
		case "true", "false":
			req.Persistent = v == "true"
		default: // an integer is true unless 0, as Jackson's IntNode
			n, err := strconv.ParseInt(v, 10, 64)
			ok = ok && err == nil
			req.Persistent = n != 0
		}
	}
	return req, ok
}

// lenientInt reads text as Jackson's NumberInput.parseAsLong does, within
// bits: an integer, else a finite number truncated toward zero.
func lenientInt(text string, bits int) (int64, bool) {
	text = strings.TrimSpace(text)
	if n, err := strconv.ParseInt(text, 10, bits); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(text, 64)
	limit := math.Ldexp(1, bits-1)
	if err != nil || math.IsNaN(f) || f >= limit || f < -limit {
		return 0, false
	}
	return int64(f), true
}

// answerRPC writes an RPC outcome as ThingsBoard's RpcV2Controller (V1: 409 and
// 408 instead of the two 504s); error statuses have an empty body.
func (s *Server) answerRPC(ctx *fasthttp.RequestCtx, res engine.RPCResult, v1 bool) {
	status := fasthttp.StatusOK
	switch res.Outcome {
	case engine.RPCPersisted:
		s.writeJSON(ctx, map[string]string{"rpcId": res.ID.String()})
		return
	case engine.RPCDone:
		if len(res.Reply) > 0 {
			ctx.SetContentType("application/json")
			ctx.SetBody(res.Reply)
			return
		}
	case engine.RPCBadReply:
		status = fasthttp.StatusNotAcceptable
	case engine.RPCNotDelivered:
		status = fasthttp.StatusGatewayTimeout
		if v1 {
			status = fasthttp.StatusConflict
		}
	case engine.RPCNoReply:
		status = fasthttp.StatusGatewayTimeout
		if v1 {
			status = fasthttp.StatusRequestTimeout
		}
	}
	ctx.SetStatusCode(status)
	ctx.Response.Header.SetNoDefaultContentType(true)
}

func (s *Server) getPersistentRPC(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "rpcId"); ok {
		v, err := s.eng.GetPersistentRPC(s.ctx, p, id)
		s.respond(ctx, v, err)
	}
}

func (s *Server) deletePersistentRPC(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if id, ok := s.pathID(ctx, "rpcId"); ok {
		s.done(ctx, s.eng.DeletePersistentRPC(s.ctx, p, id))
	}
}

// persistentRPCs is a page of a device's persistent RPCs, optionally of one
// rpcStatus.
func (s *Server) persistentRPCs(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, ok := s.pathID(ctx, "deviceId")
	if !ok {
		return
	}
	if pl, ok := pageLink(ctx); ok {
		v, err := s.eng.ListPersistentRPCs(s.ctx, p, id, string(ctx.QueryArgs().Peek("rpcStatus")), pl)
		s.respond(ctx, v, err)
	}
}
