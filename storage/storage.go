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

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
)

// Errors every back end returns for the same conditions; callers test with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	// ErrConflict means a unique index value already belongs to another record.
	ErrConflict = errors.New("unique value already taken")
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
	// GetAttributes returns the attributes of keys that exist, sorted by key;
	// keys == nil means all of the scope.
	GetAttributes(ctx context.Context, entityID uuid.UUID, scope Scope, keys []string) ([]kv.Entry, error)
	// DeleteAttributes removes keys; it returns the keys that existed, sorted.
	DeleteAttributes(ctx context.Context, entityID uuid.UUID, scope Scope, keys []string) ([]string, error)
	// DeleteEntityAttributes removes every attribute of the entity in every scope.
	DeleteEntityAttributes(ctx context.Context, entityID uuid.UUID) error
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
	// Get returns the record of (kind, id), or ErrNotFound.
	Get(ctx context.Context, kind string, id uuid.UUID) (Record, error)
	// Lookup returns the record that holds the unique value, or ErrNotFound.
	Lookup(ctx context.Context, kind, unique string) (Record, error)
	// List returns all records of kind with the owner, in ascending ID order.
	List(ctx context.Context, kind string, owner uuid.UUID) ([]Record, error)
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
