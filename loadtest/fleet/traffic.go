package fleet

import (
	"sync/atomic"
	"time"

	"github.com/sluice-iot/sluice/loadtest"
)

// Request kinds, as the report counts them.
const (
	KindTelemetry  = "telemetry"
	KindAttributes = "attributes"
)

// traffic is the loadtest.Generator of a fleet: requests go to the devices in turn,
// so each device sends 1/len(devices) of them; every attrEvery-th request of a
// device posts client attributes instead of telemetry.
type traffic struct {
	telemetry, attributes []string // paths, by device
	profile               loadtest.Profile
	rows                  int
	attrEvery             uint64
	next                  atomic.Uint64
	clocks                []atomic.Int64 // per device: the last timestamp used (ms)
	now                   func() int64   // ms
}

// prefix is the path of the target URL ("" or "/tb"), which every path starts with.
func newTraffic(devices []Device, prefix string, profile loadtest.Profile, rows, attrEvery int) *traffic {
	t := &traffic{profile: profile, rows: max(rows, 1), attrEvery: uint64(max(attrEvery, 0)),
		clocks: make([]atomic.Int64, len(devices)), now: func() int64 { return time.Now().UnixMilli() }}
	for _, d := range devices {
		t.telemetry = append(t.telemetry, prefix+"/api/v1/"+d.Token+"/telemetry")
		t.attributes = append(t.attributes, prefix+"/api/v1/"+d.Token+"/attributes")
	}
	return t
}

// generate is the loadtest.Generator.
func (t *traffic) generate(_ int, _ uint64, r *loadtest.Request) {
	n := t.next.Add(1) - 1
	devices := uint64(len(t.telemetry))
	d, k := int(n%devices), n/devices // the device, and its own request number
	if t.attrEvery > 0 && k%t.attrEvery == t.attrEvery-1 {
		r.Path, r.Kind = t.attributes[d], KindAttributes
		r.Body = loadtest.AppendAttributes(r.Body, d, k)
		return
	}
	var ts int64
	if t.profile.Timestamped() {
		ts = t.reserve(d, t.rows)
	}
	r.Path, r.Kind = t.telemetry[d], KindTelemetry
	r.Body, r.Points = t.profile.Append(r.Body, k, ts, t.rows)
}

// reserve returns the first of n timestamps for device d that no earlier request
// of d used: the wall clock, or just past the device's last timestamp when it sends
// faster than one row per millisecond. So the rows of a device never overwrite
// each other, and stay close to real time.
func (t *traffic) reserve(d, n int) int64 {
	c := &t.clocks[d]
	for {
		last := c.Load()
		first := max(last+1, t.now())
		if c.CompareAndSwap(last, first+int64(n)-1) {
			return first
		}
	}
}
