package engine

import (
	"context"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// HistoryQuery is a time-series history read over several keys (compat §6).
type HistoryQuery struct {
	EntityID uuid.UUID
	Keys     []string
	StartTs  int64
	EndTs    int64
	Interval int64
	Agg      storage.Agg
	Limit    int
	Asc      bool
	// IntervalType other than milliseconds cuts at calendar boundaries in
	// Zone (UTC if nil); Interval is then not used.
	IntervalType IntervalType
	Zone         *time.Location
}

// Series is the points of one key.
type Series struct {
	Key    string
	Points []kv.Entry
}

// ParseAgg accepts ThingsBoard's aggregation names.
func ParseAgg(s string) (storage.Agg, bool) {
	switch s {
	case "", "NONE":
		return storage.AggNone, true
	case "MIN":
		return storage.AggMin, true
	case "MAX":
		return storage.AggMax, true
	case "AVG":
		return storage.AggAvg, true
	case "SUM":
		return storage.AggSum, true
	case "COUNT":
		return storage.AggCount, true
	}
	return 0, false
}

// LatestTelemetry returns the latest value of keys (nil: every key).
func (e *Engine) LatestTelemetry(ctx context.Context, entityID uuid.UUID, keys []string) ([]kv.Entry, error) {
	return e.store.Latest(ctx, entityID, keys)
}

// TelemetryHistory reads the history of each key of q, in the order of q.Keys.
func (e *Engine) TelemetryHistory(ctx context.Context, q HistoryQuery) ([]Series, error) {
	var edges []int64
	if q.Agg != storage.AggNone && q.IntervalType != IntervalMilliseconds {
		end, err := e.aggEnd(q.StartTs, q.EndTs, q.IntervalType.nominal())
		if err != nil {
			return nil, err
		}
		q.EndTs = end
		zone := q.Zone
		if zone == nil {
			zone = time.UTC
		}
		edges = calendarEdges(q.StartTs, q.EndTs, q.IntervalType, zone)
		if len(edges) < 2 {
			return make([]Series, 0), nil
		}
		q.Interval = 0
	} else if q.Agg != storage.AggNone {
		if q.Interval < 1 {
			return nil, Errorf(CodeBadRequestParams, "Invalid TsKvQuery: 'interval' must be greater than 0, but got %d. Please check your query parameters and ensure 'endTs' is greater than 'startTs' or increase 'interval'.", q.Interval)
		}
		// As ThingsBoard counts them: an interval under a second as a second.
		end, err := e.aggEnd(q.StartTs, q.EndTs, max(q.Interval, 1000))
		if err != nil {
			return nil, err
		}
		q.EndTs = end
	}
	out := make([]Series, 0, len(q.Keys))
	for _, k := range q.Keys {
		pts, err := e.store.Read(ctx, storage.ReadQuery{
			EntityID: q.EntityID, Key: k, StartTs: q.StartTs, EndTs: q.EndTs,
			Interval: q.Interval, Agg: q.Agg, Limit: q.Limit, Asc: q.Asc, Edges: edges,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, Series{Key: k, Points: pts})
	}
	return out, nil
}

// aggEnd checks the range of an aggregated read as ThingsBoard's
// BaseTimeseriesService.validate does, (end-start)/step intervals between 0
// and MaxAggIntervals, so an end before the start by less than a step passes;
// and returns the end its AbstractChunkedAggregationTimeseriesDao reads to,
// at least start+1: an empty range is one bucket of 1 ms at start.
func (e *Engine) aggEnd(start, end, step int64) (int64, error) {
	const tooMany = "Incorrect TsKvQuery. Number of intervals is to high - %s. Please increase 'interval' parameter for your query or reduce the time range of the query."
	if end < start {
		// Unsigned: the distance may not fit an int64.
		if n := uint64(start-end) / uint64(step); n > 0 {
			return 0, Errorf(CodeBadRequestParams, tooMany, "-"+strconv.FormatUint(n, 10))
		}
	} else if n := uint64(end-start) / uint64(step); n > uint64(e.cfg.MaxAggIntervals) {
		return 0, Errorf(CodeBadRequestParams, tooMany, strconv.FormatUint(n, 10))
	}
	if end <= start && start < math.MaxInt64 {
		end = start + 1
	}
	return end, nil
}

// TelemetryKeys lists the time-series keys of the entity.
func (e *Engine) TelemetryKeys(ctx context.Context, entityID uuid.UUID) ([]string, error) {
	return e.store.SeriesKeys(ctx, entityID)
}

// DeleteTelemetry removes history (and optionally latest values) of keys.
func (e *Engine) DeleteTelemetry(ctx context.Context, q storage.DeleteQuery) error {
	if len(q.Keys) == 0 {
		return Errorf(CodeBadRequestParams, "Empty keys: []")
	}
	return e.store.DeleteSeries(ctx, q)
}

func sortStrings(s []string) { slices.Sort(s) }
