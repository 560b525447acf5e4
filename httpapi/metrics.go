package httpapi

import (
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
)

// Request metrics by route pattern (never the path: it may carry a device token),
// method and status. The metric objects of a (route, method) are made once and
// kept in routeStats, so a request costs two map reads and atomic updates, no
// name building and no allocation once its status has been seen.
type routeStats struct {
	duration *metrics.Histogram
	mu       sync.RWMutex
	byStatus map[int]*metrics.Counter
	name     string // `route="…",method="…"`
}

func (rs *routeStats) counter(status int) *metrics.Counter {
	rs.mu.RLock()
	c := rs.byStatus[status]
	rs.mu.RUnlock()
	if c != nil {
		return c
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if c = rs.byStatus[status]; c == nil {
		c = metrics.GetOrCreateCounter(`sluice_http_requests_total{` + rs.name + `,status="` + strconv.Itoa(status) + `"}`)
		rs.byStatus[status] = c
	}
	return c
}

// requestMetrics holds the routeStats of every (route, method) seen.
type requestMetrics struct {
	stats sync.Map // string(method) + " " + route → *routeStats
}

func (m *requestMetrics) of(method []byte, route string) *routeStats {
	// A comparable struct key: no string is built for the lookup.
	key := methodRoute{method: methodIndex(method), route: route}
	if v, ok := m.stats.Load(key); ok {
		return v.(*routeStats)
	}
	methodName := "OTHER" // any other method: one series, so clients cannot mint labels
	if key.method < len(methods) {
		methodName = methods[key.method]
	}
	name := `route="` + route + `",method="` + methodName + `"`
	rs := &routeStats{
		duration: metrics.GetOrCreateHistogram(`sluice_http_request_duration_seconds{` + name + `}`),
		byStatus: make(map[int]*metrics.Counter),
		name:     name,
	}
	v, _ := m.stats.LoadOrStore(key, rs)
	return v.(*routeStats)
}

type methodRoute struct {
	method int
	route  string
}

var methods = []string{"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}

func methodIndex(m []byte) int {
	for i, s := range methods {
		if string(m) == s {
			return i
		}
	}
	return len(methods)
}

// instrument wraps h: every request gets its id (requestid.go), is counted by
// route, method and status, and timed. Requests no route matched count under route="unmatched".
func (s *Server) instrument(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		start := time.Now()
		setRequestID(ctx)
		h(ctx)
		echoRequestID(ctx)
		r, ok := ctx.UserValue(router.MatchedRoutePathParam).(string)
		if !ok {
			r = "unmatched"
		}
		rs := s.reqMetrics.of(ctx.Method(), r)
		rs.duration.UpdateDuration(start)
		rs.counter(ctx.Response.StatusCode()).Inc()
	}
}

// serveMetrics is GET /metrics: every metric of the process in Prometheus text
// format, with this node's gauges (open long polls, and what the node adds).
func (s *Server) serveMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	metrics.WritePrometheus(ctx, true)
	s.gauges.WritePrometheus(ctx)
}

// Gauges is the set of this node's gauges on /metrics; the node adds its own
// (spool and queue depth) with NewGauge.
func (s *Server) Gauges() *metrics.Set { return s.gauges }
