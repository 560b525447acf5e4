package engine

import (
	"context"
	"math"
	"testing"

	"github.com/sluice-iot/sluice/storage"
)

// TestHistoryIntervalsOverflow: a range wider than an int64 still counts its
// buckets and is refused past MaxAggIntervals.
func TestHistoryIntervalsOverflow(t *testing.T) {
	te := newTestEngine(t)
	_, err := te.TelemetryHistory(context.Background(), HistoryQuery{EntityID: te.demo.DemoDeviceID, Keys: []string{"a"},
		StartTs: math.MinInt64, EndTs: math.MaxInt64, Interval: 1, Agg: storage.AggAvg})
	wantCode(t, err, CodeBadRequestParams)
}

// TestRPCNegativeTimeout: a huge negative timeout means the minimum, not a
// wrapped-around expiry centuries away.
func TestRPCNegativeTimeout(t *testing.T) {
	te := newTestEngine(t)
	dev, err := te.GetDevice(context.Background(), te.tenantAdmin(t), te.demo.DemoDeviceID)
	if err != nil {
		t.Fatal(err)
	}
	timeout := int64(-9223372036855)
	r, err := te.newRPC(dev, true, &RPCRequest{Method: "m", Timeout: &timeout})
	if err != nil {
		t.Fatal(err)
	}
	if limit := te.now().Add(te.cfg.RPCMinTimeout).UnixMilli(); r.ExpirationTime > limit {
		t.Fatalf("expiration %d, want at most now + the minimum timeout (%d)", r.ExpirationTime, limit)
	}
}
