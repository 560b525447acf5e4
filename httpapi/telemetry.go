package httpapi

import (
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fasthttp/router"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// telemetryRoutes registers the ThingsBoard TelemetryController paths (compat §6).
// Path parameters keep one name per position because the router requires it: the
// two-segment V1 form /{deviceId}/{scope} is registered as /{entityType}/{entityId}.
func (s *Server) telemetryRoutes(r *router.Router) {
	g := r.Group("/api/plugins/telemetry")
	g.GET("/{entityType}/{entityId}/values/timeseries", s.authed(s.getTimeseries))
	g.GET("/{entityType}/{entityId}/values/timeseries/history", s.authed(s.getTimeseries))
	g.GET("/{entityType}/{entityId}/values/attributes", s.authed(s.getAttributes))
	g.GET("/{entityType}/{entityId}/values/attributes/{scope}", s.authed(s.getAttributes))
	g.GET("/{entityType}/{entityId}/keys/timeseries", s.authed(s.getTimeseriesKeys))
	g.GET("/{entityType}/{entityId}/keys/attributes", s.authed(s.getAttributeKeys))
	g.GET("/{entityType}/{entityId}/keys/attributes/{scope}", s.authed(s.getAttributeKeys))

	g.POST("/{entityType}/{entityId}/attributes/{scope}", s.authed(s.postAttributes))
	g.POST("/{entityType}/{entityId}/{scope}", s.authed(s.postAttributes))
	g.POST("/{entityType}/{entityId}", s.authed(s.postDeviceAttributesV1))
	g.POST("/{entityType}/{entityId}/timeseries/{scope}", s.authed(s.postTimeseries))
	g.POST("/{entityType}/{entityId}/timeseries/{scope}/{ttl}", s.authed(s.postTimeseries))

	g.DELETE("/{entityType}/{entityId}/{scope}", s.authed(s.deleteAttributes))
	g.DELETE("/{entityType}/{entityId}", s.authed(s.deleteDeviceAttributesV1))
	g.DELETE("/{entityType}/{entityId}/timeseries/delete", s.authed(s.deleteTimeseries))
}

// entity resolves the {entityType}/{entityId} of the path, checks access, and
// returns the entity's id and its tenant's.
func (s *Server) entity(ctx *fasthttp.RequestCtx, p *engine.Principal, entityType, rawID string, write bool) (id, tenantID uuid.UUID, ok bool) {
	id, err := engine.ParseID(rawID) // the 36-character form only, as on every other route
	if err != nil {
		s.fail(ctx, err)
		return uuid.Nil, uuid.Nil, false
	}
	if tenantID, err = s.eng.AuthorizeEntity(s.ctx, p, entityType, id, write); err != nil {
		s.fail(ctx, err)
		return uuid.Nil, uuid.Nil, false
	}
	return id, tenantID, true
}

// pathParam is a path segment, percent-decoded as Spring decodes a
// @PathVariable: the router matches the raw path (so an encoded "/" stays in
// its segment), and clients encode what a URL cannot hold (a token "tök|en" is
// sent as t%C3%B6k%7Cen). A malformed escape is kept as it came.
func pathParam(ctx *fasthttp.RequestCtx, name string) string {
	v, _ := ctx.UserValue(name).(string)
	if strings.IndexByte(v, '%') >= 0 {
		if d, err := url.PathUnescape(v); err == nil {
			return d
		}
	}
	return v
}

// keysParam is the keys asked for, each once, in the order first asked: an
// answer is a JSON object, a member per key. None is nil. As ThingsBoard's
// getKeys: repeated "key" parameters, each one key whole, when there is one;
// else "keys", a comma list.
func keysParam(args *fasthttp.Args) []string {
	var keys []string
	for _, k := range args.PeekMulti("key") {
		if len(k) > 0 {
			keys = append(keys, string(k))
		}
	}
	if len(keys) == 0 {
		keys = keyList(args, "keys")
	}
	if len(keys) < 2 {
		return keys
	}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

func int64Param(ctx *fasthttp.RequestCtx, name string, def int64) (int64, bool) {
	v := ctx.QueryArgs().Peek(name)
	if len(v) == 0 {
		return def, true
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
			"Failed to convert value of type 'java.lang.String' to required type 'long'; parameter '"+name+"': "+string(v))
		return 0, false
	}
	return n, true
}

func boolParam(ctx *fasthttp.RequestCtx, name string, def bool) (bool, bool) {
	v := ctx.QueryArgs().Peek(name)
	if len(v) == 0 {
		return def, true
	}
	// Spring's words for a boolean; anything else is a 400, not false.
	switch strings.ToLower(string(v)) {
	case "true", "on", "yes", "1":
		return true, true
	case "false", "off", "no", "0":
		return false, true
	}
	writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Invalid "+name+": "+string(v)+" (true or false)")
	return false, false
}

// getTimeseries answers latest values, or history when startTs and endTs are given
// (or on the /history path).
func (s *Server) getTimeseries(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, _, ok := s.entity(ctx, p, pathParam(ctx, "entityType"), pathParam(ctx, "entityId"), false)
	if !ok {
		return
	}
	args := ctx.QueryArgs()
	keys := keysParam(args)
	strict, ok := boolParam(ctx, "useStrictDataTypes", false)
	if !ok {
		return
	}
	// ThingsBoard routes to history by its parameters {startTs, endTs}: with
	// only one of them the request is a latest read. /history is history.
	history := args.Has("startTs") && args.Has("endTs") || len(ctx.Path()) > 8 && string(ctx.Path()[len(ctx.Path())-8:]) == "/history"
	if !history {
		latest, err := s.eng.LatestTelemetry(s.ctx, id, keys)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		s.writeLatest(ctx, keys, latest, strict)
		return
	}
	q := engine.HistoryQuery{EntityID: id, Keys: keys}
	if !args.Has("startTs") || !args.Has("endTs") {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Required request parameters 'startTs' and 'endTs' are not present")
		return
	}
	for _, name := range []string{"startTs", "endTs"} {
		// Spring converts an empty value to null, which a required
		// parameter refuses.
		if len(args.Peek(name)) == 0 {
			writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
				"Required request parameter '"+name+"' for method parameter type Long is present but converted to null")
			return
		}
	}
	if q.StartTs, ok = int64Param(ctx, "startTs", 0); !ok {
		return
	}
	if q.EndTs, ok = int64Param(ctx, "endTs", 0); !ok {
		return
	}
	if q.Interval, ok = int64Param(ctx, "interval", 0); !ok {
		return
	}
	limit, ok := int64Param(ctx, "limit", 100)
	if !ok {
		return
	}
	if limit != int64(int32(limit)) { // ThingsBoard's limit is an Integer
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
			"Failed to convert value of type 'java.lang.String' to required type 'java.lang.Integer'; parameter 'limit': "+string(args.Peek("limit")))
		return
	}
	q.Limit = int(limit)
	agg, okAgg := engine.ParseAgg(string(args.Peek("agg")))
	if !okAgg {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Invalid aggregation: "+string(args.Peek("agg")))
		return
	}
	q.Agg = agg
	// intervalType and timeZone shape aggregation buckets only; ThingsBoard
	// ignores them without one. A calendar type ignores interval.
	if q.IntervalType, ok = engine.ParseIntervalType(string(args.Peek("intervalType"))); !ok {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
			"Invalid intervalType: "+string(args.Peek("intervalType"))+" (MILLISECONDS, WEEK, WEEK_ISO, MONTH or QUARTER)")
		return
	}
	if q.Agg == storage.AggNone {
		q.IntervalType = engine.IntervalMilliseconds
	}
	if q.IntervalType == engine.IntervalMilliseconds && q.Interval == 0 {
		q.Agg = storage.AggNone // compat §6: an aggregation with interval 0 is no aggregation
	}
	if q.IntervalType != engine.IntervalMilliseconds {
		// A zone ThingsBoard cannot read falls back to its server's zone; here
		// a wrong name is a 400 rather than a silent UTC.
		if q.Zone, ok = engine.ParseZoneID(string(args.Peek("timeZone"))); !ok {
			writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Invalid timeZone: "+string(args.Peek("timeZone")))
			return
		}
	}
	switch o := strings.ToUpper(string(args.Peek("orderBy"))); o { // Spring's Sort.Direction: any case
	case "", "DESC":
	case "ASC":
		q.Asc = true
	default:
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Invalid orderBy: "+string(args.Peek("orderBy")))
		return
	}
	if q.Agg != storage.AggNone {
		q.Asc = true // ThingsBoard's buckets come oldest first whatever orderBy says: it orders raw points only
	} else if q.Limit < 1 {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Page size must not be less than one (limit)")
		return
	}
	series, err := s.eng.TelemetryHistory(s.ctx, q)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	buf := append(make([]byte, 0, 512), '{')
	n := 0
	for _, sr := range series {
		if len(sr.Points) == 0 {
			continue
		}
		if n > 0 {
			buf = append(buf, ',')
		}
		n++
		buf = appendSeries(buf, sr.Key, sr.Points, strict)
	}
	buf = append(buf, '}')
	ctx.SetContentType("application/json")
	ctx.SetBody(buf)
}

// writeLatest writes {"key":[{"ts","value"}]}; a requested key with no value gets
// [{"ts":<now>,"value":null}] as ThingsBoard answers.
func (s *Server) writeLatest(ctx *fasthttp.RequestCtx, keys []string, latest []kv.Entry, strict bool) {
	buf := append(make([]byte, 0, 256), '{')
	byKey := make(map[string]int, len(latest))
	for i, e := range latest {
		byKey[e.Key] = i
	}
	n := 0
	emit := func(key string, e *kv.Entry) {
		if n > 0 {
			buf = append(buf, ',')
		}
		n++
		if e != nil {
			buf = appendSeries(buf, key, []kv.Entry{*e}, strict)
			return
		}
		buf = kv.AppendJSONString(buf, key)
		buf = append(buf, `:[{"ts":`...)
		buf = strconv.AppendInt(buf, time.Now().UnixMilli(), 10)
		buf = append(buf, `,"value":null}]`...)
	}
	if keys == nil {
		for i := range latest {
			emit(latest[i].Key, &latest[i])
		}
	} else {
		for _, k := range keys {
			if i, ok := byKey[k]; ok {
				emit(k, &latest[i])
			} else {
				emit(k, nil)
			}
		}
	}
	buf = append(buf, '}')
	ctx.SetContentType("application/json")
	ctx.SetBody(buf)
}

func appendSeries(buf []byte, key string, pts []kv.Entry, strict bool) []byte {
	buf = kv.AppendJSONString(buf, key)
	buf = append(buf, ':', '[')
	for i, pt := range pts {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"ts":`...)
		buf = strconv.AppendInt(buf, pt.Ts, 10)
		buf = append(buf, `,"value":`...)
		if strict {
			buf = pt.Value.AppendJSON(buf)
		} else {
			buf = kv.AppendJSONString(buf, pt.Value.Text())
		}
		buf = append(buf, '}')
	}
	return append(buf, ']')
}

// scopesParam resolves the optional {scope} path segment; none means all three.
func scopesParam(ctx *fasthttp.RequestCtx) ([]storage.Scope, bool) {
	raw := pathParam(ctx, "scope")
	if raw == "" {
		return []storage.Scope{storage.ClientScope, storage.ServerScope, storage.SharedScope}, true // ThingsBoard's AttributeScope order
	}
	sc, ok := storage.ParseScope(raw)
	if !ok {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Invalid scope: "+raw)
		return nil, false
	}
	return []storage.Scope{sc}, true
}

// getAttributes answers [{"lastUpdateTs","key","value"}] with native value types.
func (s *Server) getAttributes(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, _, ok := s.entity(ctx, p, pathParam(ctx, "entityType"), pathParam(ctx, "entityId"), false)
	if !ok {
		return
	}
	scopes, ok := scopesParam(ctx)
	if !ok {
		return
	}
	keys := keysParam(ctx.QueryArgs())
	buf := append(make([]byte, 0, 256), '[')
	n := 0
	for _, sc := range scopes {
		attrs, err := s.eng.Attributes(s.ctx, id, sc, keys)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		for _, a := range attrs {
			if n > 0 {
				buf = append(buf, ',')
			}
			n++
			buf = append(buf, `{"lastUpdateTs":`...)
			buf = strconv.AppendInt(buf, a.Ts, 10)
			buf = append(buf, `,"key":`...)
			buf = kv.AppendJSONString(buf, a.Key)
			buf = append(buf, `,"value":`...)
			buf = a.Value.AppendJSON(buf)
			buf = append(buf, '}')
		}
	}
	buf = append(buf, ']')
	ctx.SetContentType("application/json")
	ctx.SetBody(buf)
}

func (s *Server) getAttributeKeys(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, _, ok := s.entity(ctx, p, pathParam(ctx, "entityType"), pathParam(ctx, "entityId"), false)
	if !ok {
		return
	}
	scopes, ok := scopesParam(ctx)
	if !ok {
		return
	}
	keys, err := s.eng.AttributeKeys(s.ctx, id, scopes...)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, nonNil(keys))
}

func (s *Server) getTimeseriesKeys(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, _, ok := s.entity(ctx, p, pathParam(ctx, "entityType"), pathParam(ctx, "entityId"), false)
	if !ok {
		return
	}
	keys, err := s.eng.TelemetryKeys(s.ctx, id)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.writeJSON(ctx, nonNil(keys))
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// writableScope parses a REST attribute scope: only SERVER_SCOPE and SHARED_SCOPE
// can be written by the platform (compat §6).
func writableScope(ctx *fasthttp.RequestCtx, raw string) (storage.Scope, bool) {
	sc, ok := storage.ParseScope(raw)
	switch {
	case !ok:
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Invalid scope: "+raw)
		return 0, false
	case sc == storage.ClientScope:
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Invalid scope: CLIENT_SCOPE")
		return 0, false
	}
	return sc, true
}

func (s *Server) postAttributes(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	s.saveAttributes(ctx, p, pathParam(ctx, "entityType"), pathParam(ctx, "entityId"), pathParam(ctx, "scope"))
}

// postDeviceAttributesV1 serves POST /api/plugins/telemetry/{deviceId}/{scope}.
func (s *Server) postDeviceAttributesV1(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	s.saveAttributes(ctx, p, "DEVICE", pathParam(ctx, "entityType"), pathParam(ctx, "entityId"))
}

func (s *Server) saveAttributes(ctx *fasthttp.RequestCtx, p *engine.Principal, entityType, rawID, rawScope string) {
	id, _, ok := s.entity(ctx, p, entityType, rawID, true)
	if !ok {
		return
	}
	scope, ok := writableScope(ctx, rawScope)
	if !ok {
		return
	}
	b := batchPool.Get().(*batch)
	defer func() { b.reset(); batchPool.Put(b) }()
	if !s.decodeAttributes(ctx, b, true) {
		return
	}
	if len(b.entries) == 0 {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "No attributes data found in request body!")
		return
	}
	if err := s.eng.SaveAttributes(s.ctx, id, scope, b.entries); err != nil {
		s.fail(ctx, err)
	}
}

func (s *Server) postTimeseries(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	if ttl := pathParam(ctx, "ttl"); ttl != "" {
		// ThingsBoard's Long ttl: a number, or 400. Sluice keeps history without
		// a per-write TTL, so its value is not used.
		if _, err := strconv.ParseInt(ttl, 10, 64); err != nil {
			writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Invalid ttl: "+ttl)
			return
		}
	}
	id, tenantID, ok := s.entity(ctx, p, pathParam(ctx, "entityType"), pathParam(ctx, "entityId"), true)
	if !ok {
		return
	}
	b := batchPool.Get().(*batch)
	defer func() { b.reset(); batchPool.Put(b) }()
	if !s.decodeTelemetry(ctx, b, true) {
		s.rejected(ctx, id)
		return
	}
	if len(b.entries) == 0 {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "No time series data found in request body!")
		s.rejected(ctx, id)
		return
	}
	for _, e := range b.entries {
		b.rows = append(b.rows, storage.Row{TenantID: tenantID, EntityID: id, Entry: e})
	}
	if err := s.ingest.Write(s.ctx, b.rows); err != nil {
		s.fail(ctx, err)
	}
}

func (s *Server) deleteAttributes(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	s.removeAttributes(ctx, p, pathParam(ctx, "entityType"), pathParam(ctx, "entityId"), pathParam(ctx, "scope"))
}

// deleteDeviceAttributesV1 serves DELETE /api/plugins/telemetry/{deviceId}/{scope}.
func (s *Server) deleteDeviceAttributesV1(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	s.removeAttributes(ctx, p, "DEVICE", pathParam(ctx, "entityType"), pathParam(ctx, "entityId"))
}

func (s *Server) removeAttributes(ctx *fasthttp.RequestCtx, p *engine.Principal, entityType, rawID, rawScope string) {
	id, _, ok := s.entity(ctx, p, entityType, rawID, true)
	if !ok {
		return
	}
	scope, ok := storage.ParseScope(rawScope)
	if !ok {
		writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams, "Invalid scope: "+rawScope)
		return
	}
	if err := s.eng.DeleteAttributes(s.ctx, id, scope, keysParam(ctx.QueryArgs())); err != nil {
		s.fail(ctx, err)
	}
}

func (s *Server) deleteTimeseries(ctx *fasthttp.RequestCtx, p *engine.Principal) {
	id, _, ok := s.entity(ctx, p, pathParam(ctx, "entityType"), pathParam(ctx, "entityId"), true)
	if !ok {
		return
	}
	q := storage.DeleteQuery{EntityID: id, Keys: keysParam(ctx.QueryArgs())}
	if len(q.Keys) == 0 {
		s.fail(ctx, engine.Errorf(engine.CodeBadRequestParams, "Empty keys: []")) // checked first, as ThingsBoard
		return
	}
	all := false
	for _, b := range []struct {
		name string
		def  bool
		dst  *bool
	}{{"deleteLatest", true, &q.DeleteLatest}, {"rewriteLatestIfDeleted", false, &q.RewriteLatest}, {"deleteAllDataForKeys", false, &all}} {
		if *b.dst, ok = boolParam(ctx, b.name, b.def); !ok {
			return
		}
	}
	if all {
		q.StartTs, q.EndTs = math.MinInt64, math.MaxInt64
	} else {
		// An empty value is null to Spring, as absent.
		if len(ctx.QueryArgs().Peek("startTs")) == 0 || len(ctx.QueryArgs().Peek("endTs")) == 0 {
			writeError(ctx, fasthttp.StatusBadRequest, engine.CodeBadRequestParams,
				"When deleteAllDataForKeys is false, start and end timestamp values shouldn't be empty")
			return
		}
		if q.StartTs, ok = int64Param(ctx, "startTs", 0); !ok {
			return
		}
		if q.EndTs, ok = int64Param(ctx, "endTs", 0); !ok {
			return
		}
	}
	if err := s.eng.DeleteTelemetry(s.ctx, q); err != nil {
		s.fail(ctx, err)
	}
}
