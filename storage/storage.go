// Package storage declares what Sluice needs from a back end. A back end lives in
// its own sub-package (storage/embedded, later storage/clickhouse and storage/redis)
// and must pass the conformance suite in storage/storagetest.
//
// The split follows the production shape: Telemetry is history and latest values
// (ClickHouse in production), Entities and Attributes are platform state (Redis in
// production). The embedded back end implements all three in one local folder.
package storage

import (
	"context"
	"errors"
	"sort"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
)

// Errors every back end returns for the same conditions; callers test with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	// ErrConflict means a unique index value already belongs to another record.
	ErrConflict = errors.New("unique value already taken")
	// ErrChanged means a Replace found the record changed since it was read.
	ErrChanged = errors.New("changed meanwhile")
	// ErrUnavailable means the back end cannot serve now (down, closed); retry later.
	ErrUnavailable = errors.New("storage unavailable")
)

// Row is one telemetry point of one entity.
type Row struct {
	TenantID uuid.UUID
	EntityID uuid.UUID
	kv.Entry
}

// Agg is an aggregation function for time-series reads.
type Agg uint8

const (
	AggNone Agg = iota
	AggMin
	AggMax
	AggAvg
	AggSum
	AggCount
)

// ReadQuery selects the history of one key of one entity in [StartTs, EndTs).
//
// With Agg == AggNone or Interval <= 0 the raw points come back, at most Limit of
// them (0 means 100), newest first unless Asc. Otherwise the range is cut into
// buckets [start, start+Interval) from StartTs, the last one clipped to EndTs; each
// non-empty bucket gives one point whose Ts is the middle of its (clipped) bucket,
// start + (min(start+Interval, EndTs)-start)/2 as ThingsBoard computes it, in
// ascending order unless !Asc; Limit does not apply.
//
// Aggregation typing follows ThingsBoard: COUNT is a Long over all values; MIN, MAX
// and SUM over only Long values are Long, over any Double (or mixed) are Double; AVG
// is Double. Booleans, strings and JSON are ignored by MIN/MAX/AVG/SUM; a bucket
// with nothing numeric but COUNT is left out.
type ReadQuery struct {
	EntityID uuid.UUID
	Key      string
	StartTs  int64
	EndTs    int64
	Interval int64
	Agg      Agg
	Limit    int
	Asc      bool
	// Edges, with an Agg and two or more ascending values, cuts the range into
	// the buckets [Edges[i], Edges[i+1]) instead of Interval steps: calendar
	// weeks, months or quarters, which differ in length. StartTs and EndTs must
	// then be Edges[0] and Edges[len-1]; a point's Ts is still the middle of
	// its bucket.
	Edges []int64
}

// Aggregated says whether q asks for buckets rather than raw points.
func (q *ReadQuery) Aggregated() bool {
	return q.Agg != AggNone && (q.Interval > 0 || len(q.Edges) > 1)
}

// EdgeBucket is the index of the bucket [edges[i], edges[i+1]) that holds ts,
// which lies in [edges[0], edges[len-1]).
func EdgeBucket(edges []int64, ts int64) int {
	// The first edge above ts closes its bucket.
	return sort.Search(len(edges), func(i int) bool { return edges[i] > ts }) - 1
}

// EdgeMid is the Ts of bucket i: the middle of [edges[i], edges[i+1]).
func EdgeMid(edges []int64, i int) int64 {
	return edges[i] + int64(uint64(edges[i+1]-edges[i])/2)
}

// DeleteQuery removes the history of Keys in [StartTs, EndTs). With DeleteLatest the
// latest value goes too when its ts lies in that range; then, with RewriteLatest, the
// newest remaining point (if any) becomes the latest value.
type DeleteQuery struct {
	EntityID      uuid.UUID
	Keys          []string
	StartTs       int64
	EndTs         int64
	DeleteLatest  bool
	RewriteLatest bool
	// Version, when set, is the delete's version (internal/version) for back
	// ends that keep one: rows with an older one are hidden. Zero: the back end
	// takes one.
	Version uint64
}

// Telemetry stores time series: history and the latest value of each key.
type Telemetry interface {
	// Write stores rows. When it returns nil every row is durable: it survives a
	// kill -9 of the process. A second write of the same (entity, key, ts) replaces the
	// first (never two rows). The latest value of a key is the one with the newest ts,
	// not the last one written; on equal ts the later write wins.
	Write(ctx context.Context, rows []Row) error
	// Latest returns the latest value of each of keys that exists, in the order of
	// keys; keys == nil means every key of the entity, sorted by key.
	Latest(ctx context.Context, entityID uuid.UUID, keys []string) ([]kv.Entry, error)
	// Read returns history as described on ReadQuery.
	Read(ctx context.Context, q ReadQuery) ([]kv.Entry, error)
	// SeriesKeys lists the time-series keys the entity has a latest value for, sorted.
	SeriesKeys(ctx context.Context, entityID uuid.UUID) ([]string, error)
	// DeleteSeries removes history and latest values as described on DeleteQuery.
	DeleteSeries(ctx context.Context, q DeleteQuery) error
	// DeleteEntitySeries removes every time series of the entity (device deletion).
	DeleteEntitySeries(ctx context.Context, entityID uuid.UUID) error
}

// Scope is an attribute scope.
type Scope uint8

const (
	ClientScope Scope = 1
	SharedScope Scope = 2
	ServerScope Scope = 3
)

// String gives the ThingsBoard name of the scope.
func (s Scope) String() string {
	switch s {
	case ClientScope:
		return "CLIENT_SCOPE"
	case SharedScope:
		return "SHARED_SCOPE"
	case ServerScope:
		return "SERVER_SCOPE"
	}
	return "UNKNOWN_SCOPE"
}

// ParseScope accepts the ThingsBoard scope names.
func ParseScope(s string) (Scope, bool) {
	switch s {
	case "CLIENT_SCOPE":
		return ClientScope, true
	case "SHARED_SCOPE":
		return SharedScope, true
	case "SERVER_SCOPE":
		return ServerScope, true
	}
	return 0, false
}

// Attributes stores the attributes of entities, per scope. An attribute is a
// kv.Entry whose Ts is its lastUpdateTs.
type Attributes interface {
	// SaveAttributes creates or replaces attributes; durable when it returns nil.
	SaveAttributes(ctx context.Context, entityID uuid.UUID, scope Scope, attrs []kv.Entry) error
	// SaveAttributesOf is SaveAttributes for many entities at once, in one
	// sync or round trip: what a node writes of its devices' activity.
	SaveAttributesOf(ctx context.Context, scope Scope, writes []EntityAttributes) error
	// GetAttributes returns the attributes of keys that exist, sorted by key;
	// keys == nil means all of the scope.
	GetAttributes(ctx context.Context, entityID uuid.UUID, scope Scope, keys []string) ([]kv.Entry, error)
	// DeleteAttributes removes keys; it returns the keys that existed, sorted.
	DeleteAttributes(ctx context.Context, entityID uuid.UUID, scope Scope, keys []string) ([]string, error)
	// DeleteEntityAttributes removes every attribute of the entity in every scope.
	DeleteEntityAttributes(ctx context.Context, entityID uuid.UUID) error
}

// EntityAttributes are attributes of one entity, for SaveAttributesOf.
type EntityAttributes struct {
	EntityID uuid.UUID
	Attrs    []kv.Entry
}

// Record is one platform entity (tenant, customer, user, device, profile, ...) as
// an opaque document. The engine encodes it; the back end only stores and indexes it.
type Record struct {
	Kind string
	ID   uuid.UUID
	// Owner groups records for List, usually the tenant id (uuid.Nil for
	// system-level records such as tenants).
	Owner uuid.UUID
	Data  []byte
	// Unique holds index values that must be unique within Kind, written as
	// "index:value" (for example "name:<tenant>/<device name>"). Lookup finds a
	// record by one of them.
	Unique []string
}

// Entities stores platform records.
type Entities interface {
	// Put creates or replaces the record of (Kind, ID) with its unique values,
	// atomically: if any unique value belongs to another record of the Kind it
	// returns ErrConflict and changes nothing. Values the old version had and the
	// new one lacks are released. Durable when it returns nil.
	Put(ctx context.Context, r Record) error
	// Replace is Put on the condition that the record exists and its Data is
	// still prev, as read: ErrNotFound when it is gone, ErrChanged when another
	// write came between. A read-modify-write through it neither undoes a
	// concurrent update nor brings back a deleted record.
	Replace(ctx context.Context, r Record, prev []byte) error
	// Get returns the record of (kind, id), or ErrNotFound.
	Get(ctx context.Context, kind string, id uuid.UUID) (Record, error)
	// Lookup returns the record that holds the unique value, or ErrNotFound.
	// Unique values hold device tokens, provisioning keys and e-mails, which
	// callers log with errors: no error of Put or Lookup may quote one.
	Lookup(ctx context.Context, kind, unique string) (Record, error)
	// List returns all records of kind with the owner, in ascending ID order.
	List(ctx context.Context, kind string, owner uuid.UUID) ([]Record, error)
	// Count returns how many records of kind the owner has, as len(List)
	// would, without reading the records: the engine counts a tenant's
	// devices, customers and users against its profile's limits on each create.
	Count(ctx context.Context, kind string, owner uuid.UUID) (int, error)
	// Delete removes the record and releases its unique values; ErrNotFound if absent.
	Delete(ctx context.Context, kind string, id uuid.UUID) error
}

// Backend is everything a Sluice node needs from storage.
type Backend interface {
	Telemetry
	Attributes
	Entities
	// Close flushes and releases the back end.
	Close() error
}

// Reporter computes the aggregates of an analytics report in the back end: one
// pass over the history of many devices, grouped by report group, key and time
// bucket. Back ends that serve reports implement it next to Telemetry; both the
// embedded and the ClickHouse back end must give the same rows (storagetest.RunReport).
type Reporter interface {
	Report(ctx context.Context, q ReportQuery) ([]ReportRow, error)
}

// ReportQuery asks for the history of Keys of Devices in [StartTs, EndTs), grouped
// by (Groups[i] of the point's device, key, bucket). The engine resolves each
// device's dimension values (name, attributes, owner, …) and numbers the distinct
// value tuples; the back end only sees those group numbers.
//
// Buckets are taken on the wall clock of the report's time zone: the point's wall
// time is Ts + the offset of the last Zone shift with From <= Ts (Zone is sorted by
// From and its first From is <= StartTs; empty means UTC), and Bucket.Key of that
// wall time is the point's bucket. Zone shifts make calendar buckets follow DST.
type ReportQuery struct {
	Devices []uuid.UUID
	Groups  []uint32
	Keys    []string
	StartTs int64
	EndTs   int64
	Zone    []ZoneShift
	Bucket  Bucket
	// Aggs says which parts of ReportRow the caller reads; back ends may skip the others.
	Aggs ReportAggs
}

// ZoneShift is the UTC offset (ms) of the time zone from instant From (epoch ms) on.
type ZoneShift struct {
	From     int64
	OffsetMs int64
}

// ReportAggs is a set of report aggregations.
type ReportAggs uint16

const (
	ReportAvg ReportAggs = 1 << iota
	ReportSum
	ReportMin
	ReportMax
	ReportCount
	ReportUniq
	ReportLatest
	ReportDelta
)

// ReportRow is the aggregate of one (group, key, bucket) that has at least one point.
//
// Numeric values are Longs and Doubles taken as float64; other kinds count only
// for Count, Uniq and Latest. NumCount, Sum, Min and Max cover the numeric values
// (Min and Max are 0 when NumCount is 0). Uniq counts distinct typed values (a Long
// 1 and a Double 1.0 differ). Latest is the value with the newest ts; on equal ts
// the device with the greatest id wins. Delta is, for each device, its last minus
// its first numeric value in the bucket (by ts), summed over the group's devices
// that have a numeric value there.
type ReportRow struct {
	Group    uint32
	Key      string
	Bucket   int64
	Count    int64
	NumCount int64
	Sum      float64
	Min      float64
	Max      float64
	Uniq     int64
	Latest   kv.Value
	LatestTs int64
	Delta    float64
}

// BucketUnit is how a report cuts time. Timeline units (Minute … Year) give the
// start of the bucket; the fold units give a part of the wall clock, so that, for
// example, every Monday falls into one bucket.
type BucketUnit uint8

const (
	// BucketNone puts the whole range in one bucket, key 0.
	BucketNone BucketUnit = iota
	// Timeline units, key = wall ms of the bucket start. Minutes and hours are
	// counted from the wall midnight, days from 1970-01-01, weeks start on Monday.
	BucketMinute
	BucketHour
	BucketDay
	BucketWeek
	// Timeline units, key = months since year 0 (year*12 + month-1) of the bucket start.
	BucketMonth
	BucketQuarter
	BucketYear
	// Fold units, key = the part: minute of hour 0–59, hour of day 0–23, ISO day
	// of week 1 (Monday)–7, day of month 1–31, ISO week of year 1–53, week of
	// month 1–6 (weeks start on Monday, week 1 holds the 1st), month 1–12,
	// quarter 1–4.
	BucketMinuteOfHour
	BucketHourOfDay
	BucketDayOfWeek
	BucketDayOfMonth
	BucketWeekOfYear
	BucketWeekOfMonth
	BucketMonthOfYear
	BucketQuarterOfYear
)

// Bucket is a unit and, for timeline units, how many of it make one bucket (0 or 1: one).
type Bucket struct {
	Unit   BucketUnit
	Amount int64
}
