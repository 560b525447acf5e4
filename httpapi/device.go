package httpapi

import (
	"strings"
	"sync"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// deviceRoutes registers the ThingsBoard device API. The access token in the path
// authenticates (provisioning: the profile's key and secret); X-Authorization is
// ignored here, as in ThingsBoard.
func (s *Server) deviceRoutes(r *router.Router) {
	r.POST("/api/v1/provision", s.provision)
	r.POST("/api/v1/{token}/telemetry", s.postTelemetry)
	r.POST("/api/v1/{token}/attributes", s.postClientAttributes)
	r.GET("/api/v1/{token}/attributes", s.getDeviceAttributes)
	r.GET("/api/v1/{token}/attributes/updates", s.getAttributeUpdates)
}

// batch is the pooled scratch of one telemetry request: parsed entries and the
// rows handed to ingest. Both alias the request body (or body, its
// decompressed form) until the write returns.
type batch struct {
	entries []kv.Entry
	rows    []storage.Row
	body    []byte
	// inflate is the budget the decompressed body was reserved from, and held
	// how much of it; reset gives it back.
	inflate *inflateBudget
	held    int
}

func (b *batch) reserve(n int) bool {
	if !b.inflate.take(n) {
		return false
	}
	b.held += n
	return true
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

func (b *batch) reset() {
	clear(b.entries)
	clear(b.rows)
	b.entries, b.rows = b.entries[:0], b.rows[:0]
	if cap(b.body) > maxPooledBody {
		b.body = nil
	}
	b.body = b.body[:0]
	if b.held > 0 {
		b.inflate.give(b.held)
	}
	b.inflate, b.held = nil, 0
}

// device authenticates a device-API request by the token in the path and counts
// it as one message against the rate limits.
func (s *Server) device(ctx *fasthttp.RequestCtx) (*engine.Device, bool) {
	dev, ok := s.deviceOfToken(ctx)
	return dev, ok && s.allowDevice(ctx, dev, 0)
}

// deviceOfToken authenticates without counting: the writes count their data
// points once decoded.
func (s *Server) deviceOfToken(ctx *fasthttp.RequestCtx) (*engine.Device, bool) {
	dev, err := s.eng.DeviceByToken(s.ctx, pathParam(ctx, "token"))
	if err != nil {
		s.fail(ctx, err)
		return nil, false
	}
	return dev, true
}

func (s *Server) postTelemetry(ctx *fasthttp.RequestCtx) {
	dev, ok := s.deviceOfToken(ctx)
	if !ok {
		return
	}
	if !s.mayWrite(ctx, dev) {
		s.rejected(ctx, dev.UUID())
		return
	}
	b := batchPool.Get().(*batch)
	defer func() { b.reset(); batchPool.Put(b) }()
	if !s.decodeTelemetry(ctx, b, false) || !s.allowDevice(ctx, dev, len(b.entries)) {
		s.rejected(ctx, dev.UUID())
		return
	}
	for _, e := range b.entries {
		b.rows = append(b.rows, storage.Row{TenantID: dev.TenantID(), EntityID: dev.UUID(), Entry: e})
	}
	if err := s.ingest.Write(s.ctx, b.rows); err != nil {
		s.fail(ctx, err)
	}
}

func (s *Server) postClientAttributes(ctx *fasthttp.RequestCtx) {
	dev, ok := s.deviceOfToken(ctx)
	if !ok {
		return
	}
	if !s.mayWrite(ctx, dev) {
		return
	}
	b := batchPool.Get().(*batch)
	defer func() { b.reset(); batchPool.Put(b) }()
	if !s.decodeAttributes(ctx, b, false) || !s.allowDevice(ctx, dev, len(b.entries)) {
		return
	}
	if err := s.eng.SaveAttributes(s.ctx, dev.UUID(), storage.ClientScope, b.entries); err != nil {
		s.fail(ctx, err)
	}
}

// getDeviceAttributes answers {"client":{..},"shared":{..}} (compat §1.3): no keys
// at all means every client and shared attribute; a scope with nothing is omitted.
func (s *Server) getDeviceAttributes(ctx *fasthttp.RequestCtx) {
	dev, ok := s.device(ctx)
	if !ok {
		return
	}
	args := ctx.QueryArgs()
	clientKeys, sharedKeys := keyList(args, "clientKeys"), keyList(args, "sharedKeys")
	all := clientKeys == nil && sharedKeys == nil
	buf := append(make([]byte, 0, 256), '{')
	first := true
	for _, sc := range []struct {
		name  string
		scope storage.Scope
		keys  []string
	}{{"client", storage.ClientScope, clientKeys}, {"shared", storage.SharedScope, sharedKeys}} {
		if !all && sc.keys == nil {
			continue
		}
		attrs, err := s.eng.Attributes(s.ctx, dev.UUID(), sc.scope, sc.keys)
		if err != nil {
			s.fail(ctx, err)
			return
		}
		if len(attrs) == 0 {
			continue
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = kv.AppendJSONString(buf, sc.name)
		buf = append(buf, ':', '{')
		for i, a := range attrs {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = kv.AppendJSONString(buf, a.Key)
			buf = append(buf, ':')
			buf = a.Value.AppendJSON(buf)
		}
		buf = append(buf, '}')
	}
	buf = append(buf, '}')
	ctx.SetContentType("application/json")
	ctx.SetBody(buf)
}

// keyList reads a key list given as comma-separated values, repeated parameters,
// or both. It returns nil when the parameter is absent or holds no key. Keys are
// not trimmed, as ThingsBoard splits them: a key written with a space around it
// must be readable and deletable by name.
func keyList(args *fasthttp.Args, name string) []string {
	var keys []string
	for _, v := range args.PeekMulti(name) {
		for k := range strings.SplitSeq(string(v), ",") {
			if k != "" {
				keys = append(keys, k)
			}
		}
	}
	return keys
}
