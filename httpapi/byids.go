package httpapi

import (
	"context"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// authedHandler is a REST handler behind authed.
type authedHandler = func(ctx *fasthttp.RequestCtx, p *engine.Principal)

// byIDs answers ThingsBoard's "by ids" reads, GET /api/{entities}?{param}=a,b
// and /api/{entities}/list?{param}=a,b: the entities of those ids the caller
// may read, in the order asked; the others are left out (engine/byids.go).
func byIDs[T any](s *Server, param string, get func(context.Context, *engine.Principal, []uuid.UUID) ([]T, error)) authedHandler {
	return func(ctx *fasthttp.RequestCtx, p *engine.Principal) {
		if _, ok := requiredParam(ctx, param); !ok {
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
