package engine

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Rate limits of the device API and the REST API (compat §9). The limits come
// from the tenant's profile as ThingsBoard strings "capacity:seconds,…" and are
// token buckets with greedy refill, like Bucket4j's: every "capacity:seconds"
// pair allows a burst of capacity and refills capacity tokens per seconds, and a
// request passes only when every pair has room.
//
// Buckets are per node, like ThingsBoard's transport limits per transport
// instance: a tenant behind a load balancer over N nodes may reach up to N times
// its configured rate. A cluster-wide bucket would cost a Redis round trip per
// device request; divide the limits by the node count for a cluster-wide cap.

// LimitError is a request refused by a limit: Err is what the client is told and
// RetryAfter how long until the same request would pass.
type LimitError struct {
	Err        *Error
	RetryAfter time.Duration
}

func (e *LimitError) Error() string { return e.Err.Msg }
func (e *LimitError) Unwrap() error { return e.Err }

// Messages of refused requests; ThingsBoard's REST texts (RateLimitProcessingFilter).
var (
	errTenantLimit   = &Error{Code: CodeTooManyRequests, Msg: "Too many requests for current tenant!"}
	errCustomerLimit = &Error{Code: CodeTooManyRequests, Msg: "Too many requests for current customer!"}
	errDeviceLimit   = &Error{Code: CodeTooManyRequests, Msg: "Too many requests for current device!"}
)

// rateLimit is a parsed limit string; nil means unlimited.
type rateLimit struct {
	conf string
	bws  []bandwidth
}

type bandwidth struct {
	capacity float64
	period   float64 // nanoseconds
}

// parseRateLimit parses "capacity:seconds[,capacity:seconds…]"; blank is nil
// (unlimited), as an absent or null field of the tenant profile.
func parseRateLimit(s string) (*rateLimit, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	l := &rateLimit{conf: s}
	seen := map[int64]bool{}
	for part := range strings.SplitSeq(s, ",") {
		c, sec, ok := strings.Cut(strings.TrimSpace(part), ":")
		capacity, err1 := strconv.ParseInt(strings.TrimSpace(c), 10, 64)
		seconds, err2 := strconv.ParseInt(strings.TrimSpace(sec), 10, 64)
		if !ok || err1 != nil || err2 != nil || capacity <= 0 || seconds <= 0 || seconds > 100*365*86400 {
			return nil, fmt.Errorf("%q is not capacity:seconds with positive integers", strings.TrimSpace(part))
		}
		if seen[seconds] {
			// ThingsBoard's RateLimitValidator refuses it too: a profile Sluice
			// takes must import into ThingsBoard.
			return nil, fmt.Errorf("%d seconds appears twice", seconds)
		}
		seen[seconds] = true
		l.bws = append(l.bws, bandwidth{capacity: float64(capacity), period: float64(time.Duration(seconds) * time.Second)})
	}
	return l, nil
}

// bucket is the state of one rate limit for one tenant, customer or device.
type bucket struct {
	mu     sync.Mutex
	limit  *rateLimit
	tokens []float64 // per bandwidth
	last   int64     // unix ns of the last refill
}

func newBucket(l *rateLimit, now int64) *bucket {
	b := &bucket{limit: l, tokens: make([]float64, len(l.bws)), last: now}
	for i, bw := range l.bws {
		b.tokens[i] = bw.capacity
	}
	return b
}

// tokenSlack absorbs float rounding, so a request retried after the wait take
// announced passes.
const tokenSlack = 1e-6

// take consumes n tokens of every bandwidth when all have them. Otherwise it
// consumes nothing and returns how long until they will have (a request larger
// than a capacity never passes: the wait is then that bandwidth's period).
func (b *bucket) take(now int64, n float64) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if wait := b.wait(n); wait > 0 {
		return false, wait
	}
	for i := range b.tokens {
		b.tokens[i] -= n
	}
	return true, 0
}

// wait is how long until every bandwidth holds n tokens, 0 when they do; the
// caller holds mu and has refilled.
func (b *bucket) wait(n float64) time.Duration {
	var wait float64
	for i, bw := range b.limit.bws {
		if b.tokens[i] >= n-tokenSlack {
			continue
		}
		w := bw.period
		if n <= bw.capacity {
			w = (n - b.tokens[i]) / bw.capacity * bw.period
		}
		wait = max(wait, w, 1)
	}
	return time.Duration(math.Ceil(wait))
}

// give returns n tokens a request took before another bucket refused it.
func (b *bucket) give(n float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, bw := range b.limit.bws {
		b.tokens[i] = min(bw.capacity, b.tokens[i]+n)
	}
}

// check is take without taking: whether every bandwidth holds n tokens now,
// and if not how long until it will.
func (b *bucket) check(now int64, n float64) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	wait := b.wait(n)
	return wait == 0, wait
}

func (b *bucket) refill(now int64) {
	elapsed := float64(now - b.last)
	if elapsed <= 0 {
		return
	}
	b.last = now
	for i, bw := range b.limit.bws {
		b.tokens[i] = min(bw.capacity, b.tokens[i]+elapsed*bw.capacity/bw.period)
	}
}

// full reports whether the bucket has refilled completely: forgetting it then
// changes nothing, a new bucket starts full.
func (b *bucket) full(now int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	for i, bw := range b.limit.bws {
		if b.tokens[i] < bw.capacity {
			return false
		}
	}
	return true
}

// Which limit of an entity a bucket serves.
type bucketKind uint8

const (
	tenantMsgBucket bucketKind = iota
	tenantTelemetryBucket
	tenantPointsBucket
	deviceMsgBucket
	deviceTelemetryBucket
	devicePointsBucket
	tenantRESTBucket
	customerRESTBucket
)

type bucketKey struct {
	id   uuid.UUID
	kind bucketKind
}

const bucketShards = 64

// sweepEvery is how often a shard drops its full buckets, so devices that went
// quiet do not keep memory.
const sweepEvery = time.Minute

// buckets holds the buckets of this node, sharded by entity id.
type buckets struct {
	shards [bucketShards]bucketShard
}

type bucketShard struct {
	mu    sync.RWMutex
	m     map[bucketKey]*bucket
	swept int64
}

// take consumes n tokens of the bucket of key under limit l. A bucket made for
// another limit string (the profile changed) starts over under the new one.
func (bs *buckets) take(key bucketKey, l *rateLimit, now int64, n float64) (bool, time.Duration) {
	return bs.get(key, l, now).take(now, n)
}

// get returns the bucket of key for l, made (full) when there is none or its
// limit changed.
func (bs *buckets) get(key bucketKey, l *rateLimit, now int64) *bucket {
	sh := &bs.shards[key.id[15]%bucketShards]
	sh.mu.RLock()
	b := sh.m[key]
	sh.mu.RUnlock()
	if b == nil || b.limit.conf != l.conf {
		sh.mu.Lock()
		if b = sh.m[key]; b == nil || b.limit.conf != l.conf {
			if sh.m == nil {
				sh.m = make(map[bucketKey]*bucket)
			}
			sh.sweep(now)
			b = newBucket(l, now)
			sh.m[key] = b
		}
		sh.mu.Unlock()
	}
	return b
}

// sweep drops full buckets at most once per sweepEvery; the caller holds mu.
func (sh *bucketShard) sweep(now int64) {
	if now-sh.swept < int64(sweepEvery) {
		return
	}
	sh.swept = now
	for k, b := range sh.m {
		if b.full(now) {
			delete(sh.m, k)
		}
	}
}

// tenantLimits are the parsed limits of one tenant's profile; nil fields are unlimited.
type tenantLimits struct {
	tenantMsg, tenantTelemetry, tenantPoints *rateLimit
	deviceMsg, deviceTelemetry, devicePoints *rateLimit
	tenantREST, customerREST                 *rateLimit
	// rpcTTL is rpcTtlDays: persistent RPCs created longer ago are deleted
	// (ThingsBoard's RpcCleanUpService); 0 keeps them.
	rpcTTL time.Duration
	// entities are the entity limits (limits_entities.go).
	entities entityLimits
}

// noLimits is the limits of a tenant whose profile sets none (the default).
var noLimits = &tenantLimits{}

func (l *tenantLimits) none() bool { return *l == tenantLimits{} }

// limitState is the engine's part for limits: cached tenant limits, the buckets
// and the long-poll counts per device.
type limitState struct {
	tenants ttlCache[uuid.UUID, *tenantLimits]
	buckets buckets
	polls   pollCounts
}

// tryTake consumes n tokens of l's bucket for key; nil l always passes.
func (e *Engine) tryTake(l *rateLimit, id uuid.UUID, kind bucketKind, now int64, n float64, refuse *Error) error {
	if l == nil {
		return nil
	}
	if ok, wait := e.limits.buckets.take(bucketKey{id, kind}, l, now, n); !ok {
		return refusal(refuse, l, n, wait)
	}
	return nil
}

// refusal is the error of a request refused by l: a *LimitError with when to
// retry, or, for a request larger than a capacity of l (it can never pass), a
// plain 429 that says so without a Retry-After a client would wait for in vain.
func refusal(refuse *Error, l *rateLimit, n float64, wait time.Duration) error {
	for _, bw := range l.bws {
		if n > bw.capacity {
			return Errorf(refuse.Code, "%s The request counts %d, more than the limit %s allows at once.", refuse.Msg, int64(n), l.conf)
		}
	}
	return &LimitError{Err: refuse, RetryAfter: wait}
}

// charge is one bucket a request counts against.
type charge struct {
	l      *rateLimit
	id     uuid.UUID
	kind   bucketKind
	n      float64
	refuse *Error
}

// takeAll consumes each charge in order; when one refuses, the tokens the
// earlier ones took are given back, so a device refused by its own limit
// does not use up its tenant's budget for the tenant's other devices.
func (e *Engine) takeAll(now int64, charges []charge) error {
	for i, c := range charges {
		if c.l == nil {
			continue
		}
		ok, wait := e.limits.buckets.take(bucketKey{c.id, c.kind}, c.l, now, c.n)
		if ok {
			continue
		}
		for _, t := range charges[:i] {
			if t.l != nil {
				e.limits.buckets.get(bucketKey{t.id, t.kind}, t.l, now).give(t.n)
			}
		}
		return refusal(c.refuse, c.l, c.n, wait)
	}
	return nil
}

// AllowDevice counts one device-API request of dev against its tenant's and its
// own limits (compat §9): a request carrying dataPoints > 0 (telemetry or
// attributes) counts one telemetry message and its data points, any other one
// message. A refused request is a *LimitError (429, "Too many requests for
// current tenant!" or "… device!") and takes no token: the tenant is checked
// first, as in ThingsBoard, but gets back what it gave a request the device's
// own limit then refused.
func (e *Engine) AllowDevice(ctx context.Context, dev *Device, dataPoints int) error {
	clock := e.now() // once: the clock is a visible cost on the device hot path
	l, err := e.tenantLimits(ctx, dev.TenantID(), clock)
	if err != nil || l == noLimits {
		return err
	}
	now := clock.UnixNano()
	tenant, device := dev.TenantID(), dev.UUID()
	if dataPoints <= 0 {
		return e.takeAll(now, []charge{
			{l.tenantMsg, tenant, tenantMsgBucket, 1, errTenantLimit},
			{l.deviceMsg, device, deviceMsgBucket, 1, errDeviceLimit},
		})
	}
	return e.takeAll(now, writeCharges(l, tenant, device, float64(dataPoints)))
}

// writeCharges are the buckets a write of n points counts against: one
// telemetry message and n points, of the tenant, then of the device.
func writeCharges(l *tenantLimits, tenant, device uuid.UUID, n float64) []charge {
	return []charge{
		{l.tenantTelemetry, tenant, tenantTelemetryBucket, 1, errTenantLimit},
		{l.tenantPoints, tenant, tenantPointsBucket, n, errTenantLimit},
		{l.deviceTelemetry, device, deviceTelemetryBucket, 1, errDeviceLimit},
		{l.devicePoints, device, devicePointsBucket, n, errDeviceLimit},
	}
}

// MayWrite tells, before a telemetry or attributes body is decompressed and
// parsed, whether the write limits of dev and its tenant have room for one
// more message of at least one point, taking nothing: a device already over
// its limit is refused without costing the node the parse (AllowDevice then
// counts the parsed write).
func (e *Engine) MayWrite(ctx context.Context, dev *Device) error {
	clock := e.now()
	l, err := e.tenantLimits(ctx, dev.TenantID(), clock)
	if err != nil || l == noLimits {
		return err
	}
	now := clock.UnixNano()
	for _, c := range writeCharges(l, dev.TenantID(), dev.UUID(), 1) {
		if c.l == nil {
			continue
		}
		if ok, wait := e.limits.buckets.get(bucketKey{c.id, c.kind}, c.l, now).check(now, 1); !ok {
			return &LimitError{Err: c.refuse, RetryAfter: wait}
		}
	}
	return nil
}

// AllowREST counts one REST request of p against its tenant's REST limit and, for
// a customer user, its customer's (compat §9). The system administrator is not
// limited. A refused request is a *LimitError (429, code 33).
func (e *Engine) AllowREST(ctx context.Context, p *Principal) error {
	if p == nil || p.Authority == SysAdmin || isNull(p.TenantID) {
		return nil
	}
	clock := e.now()
	l, err := e.tenantLimits(ctx, p.TenantID, clock)
	if err != nil || l == noLimits {
		return err
	}
	now := clock.UnixNano()
	charges := []charge{{l.tenantREST, p.TenantID, tenantRESTBucket, 1, errTenantLimit}}
	if p.Authority == CustomerUser && !isNull(p.CustomerID) {
		charges = append(charges, charge{l.customerREST, p.CustomerID, customerRESTBucket, 1, errCustomerLimit})
	}
	return e.takeAll(now, charges) // a customer's refused call gives its tenant token back
}

// Long-poll caps. Polls are counted per node (Engine.polls) and per device;
// past a cap a poll is refused at once instead of holding a goroutine and a
// connection. 0 means no cap.

const pollShards = 64

type pollCounts struct {
	shards [pollShards]struct {
		mu sync.Mutex
		m  map[uuid.UUID]int
	}
}

// pollRetry is the Retry-After of a refused poll: a held poll of the device (or
// of the node) ends within the device's own timeout, so a second is as good a
// guess as any.
const pollRetry = time.Second

// admitPoll counts a long poll of the device, or refuses it past
// Config.LongPollMaxPerNode (503) or Config.LongPollMaxPerDevice (429). release
// must be called when the poll ends.
func (e *Engine) admitPoll(deviceID uuid.UUID) (release func(), err error) {
	n := e.polls.Add(1)
	if limit := e.cfg.LongPollMaxPerNode; limit > 0 && n > int64(limit) {
		e.polls.Add(-1)
		return nil, &LimitError{RetryAfter: pollRetry, Err: Errorf(CodeUnavailable,
			"This node holds its maximum of %d long polls (SLUICE_LONG_POLL_MAX_PER_NODE); poll again later", limit)}
	}
	limit := e.cfg.LongPollMaxPerDevice
	if limit <= 0 {
		return func() { e.polls.Add(-1) }, nil
	}
	sh := &e.limits.polls.shards[deviceID[15]%pollShards]
	sh.mu.Lock()
	if sh.m[deviceID] >= limit {
		sh.mu.Unlock()
		e.polls.Add(-1)
		return nil, &LimitError{RetryAfter: pollRetry, Err: Errorf(CodeTooManyRequests,
			"Too many long polls for current device! At most %d at once (SLUICE_LONG_POLL_MAX_PER_DEVICE)", limit)}
	}
	if sh.m == nil {
		sh.m = make(map[uuid.UUID]int)
	}
	sh.m[deviceID]++
	sh.mu.Unlock()
	return func() {
		sh.mu.Lock()
		if sh.m[deviceID]--; sh.m[deviceID] <= 0 {
			delete(sh.m, deviceID)
		}
		sh.mu.Unlock()
		e.polls.Add(-1)
	}, nil
}
