package fleet

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-iot/sluice/loadtest"
)

func devices(n int) []Device {
	d := make([]Device, n)
	for i := range d {
		d[i].Token = fmt.Sprintf("T%d", i)
	}
	return d
}

// TestTrafficRoundRobin: requests go to the devices in turn, and every third
// request of each device posts attributes.
func TestTrafficRoundRobin(t *testing.T) {
	tr := newTraffic(devices(2), "", loadtest.ProfileMeter, 1, 3)
	var got []string
	var r loadtest.Request
	for i := range 8 {
		r = loadtest.Request{}
		tr.generate(i%3, uint64(i), &r)
		got = append(got, fmt.Sprintf("%s:%s:%d", strings.TrimPrefix(r.Path, "/api/v1/"), r.Kind, r.Points))
	}
	want := "T0/telemetry:telemetry:3 T1/telemetry:telemetry:3 T0/telemetry:telemetry:3 T1/telemetry:telemetry:3 " +
		"T0/attributes:attributes:0 T1/attributes:attributes:0 T0/telemetry:telemetry:3 T1/telemetry:telemetry:3"
	if strings.Join(got, " ") != want {
		t.Fatalf("requests\n %s\nwant\n %s", strings.Join(got, " "), want)
	}
}

// TestTrafficPrefix: behind a path prefix every device path starts with it.
func TestTrafficPrefix(t *testing.T) {
	tr := newTraffic(devices(1), "/tb", loadtest.ProfileSingle, 1, 2)
	var got []string
	for i := range 2 {
		var r loadtest.Request
		tr.generate(0, uint64(i), &r)
		got = append(got, r.Path)
	}
	if strings.Join(got, " ") != "/tb/api/v1/T0/telemetry /tb/api/v1/T0/attributes" {
		t.Fatalf("paths %v", got)
	}
}

// TestTrafficTimestamps: a device's batch rows never reuse a timestamp, follow the
// clock when it moves, and run ahead of it when the device is faster than 1 row/ms.
func TestTrafficTimestamps(t *testing.T) {
	tr := newTraffic(devices(2), "", loadtest.ProfileBatch, 5, 0)
	now := int64(1000)
	tr.now = func() int64 { return now }
	f := func(device int, want int64) {
		t.Helper()
		if got := tr.reserve(device, 5); got != want {
			t.Fatalf("device %d: first timestamp %d, want %d", device, got, want)
		}
	}
	f(0, 1000)
	f(0, 1005) // same millisecond: after the previous batch
	f(1, 1000) // devices have their own clocks
	now = 2000
	f(0, 2000)
	now = 1500 // the clock went back: still after the last batch
	f(0, 2005)

	var r loadtest.Request
	tr.generate(0, 0, &r)
	if !bytes.HasPrefix(r.Body, []byte(`[{"ts":2010,`)) || r.Points != 5 {
		t.Fatalf("batch %s, %d points", r.Body, r.Points)
	}
}

func TestTokensRoundTrip(t *testing.T) {
	tokens, err := ReadTokens(strings.NewReader("# fleet\nA1\n\n  B2  \n#C3\nC3\r\n"))
	if err != nil || strings.Join(tokens, ",") != "A1,B2,C3" {
		t.Fatalf("tokens %q, %v", tokens, err)
	}
	var b bytes.Buffer
	if err := WriteTokens(&b, []Device{{Token: "A1"}, {Token: "B2", Name: "x", ID: "y"}}); err != nil || b.String() != "A1\nB2\n" {
		t.Fatalf("written %q, %v", b.String(), err)
	}
}

func TestRPCID(t *testing.T) {
	f := func(status int, body string, wantID int64, wantOK bool) {
		t.Helper()
		if id, ok := rpcID(status, []byte(body)); id != wantID || ok != wantOK {
			t.Fatalf("rpcID(%d, %s) = %d, %v", status, body, id, ok)
		}
	}
	f(200, `{"id":7,"method":"setGpio","params":{"pin":7}}`, 7, true)
	f(200, `{"id":0,"method":"m","params":{}}`, 0, true)
	f(200, `{"method":"m"}`, 0, false)
	f(200, ``, 0, false)
	f(200, `not json`, 0, false)
	f(408, `{"id":1}`, 0, false)
}

func TestOptionErrors(t *testing.T) {
	f := func(o Options, want string) {
		t.Helper()
		err := o.normalize()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want %q", err, want)
		}
	}
	f(Options{Devices: 1}, "no target URL")
	f(Options{URL: "http://x"}, "no devices")
	f(Options{URL: "http://x", Devices: -1}, "negative")
	f(Options{URL: "http://x", Devices: 1, ProvisionKey: "k"}, "provision secret")
	f(Options{URL: "http://x", Devices: 1, Profile: "nope"}, "unknown profile")
	f(Options{URL: "http://x", Devices: 1, Duration: -time.Second}, "negative duration")
	f(Options{URL: "http://x", Devices: 1, Requests: -1}, "negative duration")
	f(Options{URL: "http://x", Devices: 1, Rate: math.NaN()}, "not a number")
	f(Options{URL: "http://x", Devices: 1, Rate: math.Inf(1)}, "not a number")
	f(Options{URL: "http://x", Devices: 1, Rate: 1e300}, "above the most")

	o := Options{URL: "http://x", Tokens: []string{"a"}}
	if err := o.normalize(); err != nil || o.Profile != loadtest.ProfileSingle || o.Connections != 16 || o.BatchSize != 10 {
		t.Fatalf("defaults %+v, %v", o, err)
	}
}
