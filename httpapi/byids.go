package httpapi

import (
	"context"
	"strings"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// authedHandler is a REST handler behind authed.
type authedHandler = func(ctx *fasthttp.RequestCtx, p *engine.Principal)

// byIDs answers ThingsBoard's "by ids" reads, GET /api/{entities}?{param}=a,b
// and /api/{entities}/list?{param}=a,b: the entities of those ids the caller
// may read, in the order asked; the others are left out (engine/byids.go).
//
// An empty element (?{param}=a,,b) is left out, as Spring leaves out the
// null it converts to a Set<UUID> element; byStrictIDs refuses it.
func byIDs[T any](s *Server, param string, get func(context.Context, *engine.Principal, []uuid.UUID) ([]T, error)) authedHandler {
	return readByIDs(s, param, false, get)
}

// byStrictIDs is byIDs for the routes ThingsBoard reads as String[] and checks
// with checkArrayParameter (GET /api/devices?deviceIds=): a blank element is
// 400 "Parameter '{param}' can't be empty!".
func byStrictIDs[T any](s *Server, param string, get func(context.Context, *engine.Principal, []uuid.UUID) ([]T, error)) authedHandler {
	return readByIDs(s, param, true, get)
}

func readByIDs[T any](s *Server, param string, strict bool, get func(context.Context, *engine.Principal, []uuid.UUID) ([]T, error)) authedHandler {
	return func(ctx *fasthttp.RequestCtx, p *engine.Principal) {
		if _, ok := requiredParam(ctx, param); !ok {
			return
		}
		if strict && hasBlankElement(ctx.QueryArgs(), param) {
			writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Parameter '"+param+"' can't be empty!")
			return
		}
		raw := keyList(ctx.QueryArgs(), param)
		if len(raw) == 0 {
			writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Parameter '"+param+"' can't be empty!")
			return
		}
		ids := make([]uuid.UUID, 0, len(raw))
		for _, r := range raw {
			id, err := engine.ParseID(r)
			if err != nil {
				s.fail(ctx, err)
				return
			}
			ids = append(ids, id)
		}
		v, err := get(s.ctx, p, ids)
		s.respond(ctx, v, err)
	}
}

// hasBlankElement tells whether a value of the query parameter name, split at
// commas as Spring splits one into a String[], has a blank element (each is
// trimmed: "a, ,b" and "a,b," have one). A parameter given once with an empty
// value is no array element: Spring makes that an empty array, which byIDs
// refuses as a whole.
func hasBlankElement(args *fasthttp.Args, name string) bool {
	values := args.PeekMulti(name)
	if len(values) == 1 && len(values[0]) == 0 {
		return false
	}
	for _, v := range values {
		for k := range strings.SplitSeq(string(v), ",") {
			if strings.TrimSpace(k) == "" {
				return true
			}
		}
	}
	return false
}

// pageOrIDs serves a list path ThingsBoard maps twice, by its parameters: with
// param it is a by-ids read, otherwise page.
func pageOrIDs[T any](s *Server, page authedHandler, param string, get func(context.Context, *engine.Principal, []uuid.UUID) ([]T, error)) authedHandler {
	ids := byIDs(s, param, get)
	return func(ctx *fasthttp.RequestCtx, p *engine.Principal) {
		if ctx.QueryArgs().Has(param) {
			ids(ctx, p)
			return
		}
		page(ctx, p)
	}
}
