package loadtest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-iot/sluice/codec"
	"github.com/sluice-iot/sluice/kv"
)

// TestProfiles: every profile's body is valid JSON in a ThingsBoard telemetry form
// that the codec reads strictly, with as many points as Append says, for request
// numbers large and small.
func TestProfiles(t *testing.T) {
	f := func(p Profile, rows int, wantPoints int, wantStart byte) {
		t.Helper()
		for _, n := range []uint64{0, 1, 96, 12345, 1 << 40} {
			body, points := p.Append([]byte("junk"), n, 1_700_000_000_000, rows)
			body = body[4:]
			if !json.Valid(body) {
				t.Fatalf("%s n=%d: not JSON: %s", p, n, body)
			}
			if body[0] != wantStart {
				t.Fatalf("%s: body starts %q", p, body[0])
			}
			got, err := codec.ParseTelemetryStrict(nil, body, 42, codec.Limits{})
			if err != nil {
				t.Fatalf("%s n=%d: %v\n%s", p, n, err, body)
			}
			if points != wantPoints || len(got) != wantPoints {
				t.Fatalf("%s n=%d: Append says %d points, codec reads %d, want %d", p, n, points, len(got), wantPoints)
			}
			for _, e := range got {
				if p.Timestamped() == (e.Ts == 42) {
					t.Fatalf("%s: point %s at %d (server time 42, timestamped %v)", p, e.Key, e.Ts, p.Timestamped())
				}
			}
		}
	}
	f(ProfileSingle, 0, 1, '{')
	f(ProfileMeter, 0, 3, '{')
	f(ProfileKeys20, 0, 20, '{')
	f(ProfileMixed, 0, 8, '{')
	f(ProfileBatch, 1, 1, '[')
	f(ProfileBatch, 0, 1, '[')
	f(ProfileBatch, 50, 50, '[')
}

func TestProfileMeterKeys(t *testing.T) {
	body, _ := ProfileMeter.Append(nil, 96, 0, 0)
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["pulseCounter"].(float64); !ok || m["leakage"] != true || m["batteryLevel"] == nil || len(m) != 3 {
		t.Fatalf("meter body %s", body)
	}
}

// TestProfileMixedTypes: the mixed profile carries every value type, including
// strings that hold JSON (stored as strings) and a JSON object (stored as JSON).
func TestProfileMixedTypes(t *testing.T) {
	body, _ := ProfileMixed.Append(nil, 7, 0, 0)
	got, err := codec.ParseTelemetryStrict(nil, body, 1, codec.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]kv.Type{}
	for _, e := range got {
		types[e.Key] = e.Value.Type
	}
	want := map[string]kv.Type{"temperature": kv.Double, "humidity": kv.Long, "active": kv.Bool, "status": kv.String,
		"config": kv.String, "location": kv.String, "meta": kv.JSON}
	for k, typ := range want {
		if types[k] != typ {
			t.Fatalf("%s is %v, want %v: %s", k, types[k], typ, body)
		}
	}
	var m map[string]any
	json.Unmarshal(body, &m)
	for _, k := range []string{"config", "location"} {
		if s, _ := m[k].(string); !json.Valid([]byte(s)) || !strings.HasPrefix(s, "{") {
			t.Fatalf("%s is not a string holding a JSON object: %v", k, m[k])
		}
	}
}

// TestProfileBatchTimestamps: a batch's rows are at ts, ts+1, … in order.
func TestProfileBatchTimestamps(t *testing.T) {
	body, _ := ProfileBatch.Append(nil, 3, 5000, 10)
	got, err := codec.ParseTelemetryStrict(nil, body, 1, codec.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range got {
		if e.Ts != int64(5000+i) {
			t.Fatalf("row %d at %d", i, e.Ts)
		}
	}
}

func TestAppendAttributes(t *testing.T) {
	body := AppendAttributes(nil, 42, 10)
	got, err := codec.ParseAttributesStrict(nil, body, codec.Limits{})
	if err != nil || len(got) != 4 {
		t.Fatalf("attributes %s: %d, %v", body, len(got), err)
	}
	if !strings.Contains(string(body), `"serialNumber":"SN-42"`) {
		t.Fatalf("attributes %s", body)
	}
}

func TestParseProfile(t *testing.T) {
	for _, p := range Profiles {
		if got, err := ParseProfile(string(p)); err != nil || got != p {
			t.Fatalf("ParseProfile(%s) = %v, %v", p, got, err)
		}
	}
	if _, err := ParseProfile("nope"); err == nil || !strings.Contains(err.Error(), "single, meter, keys20, mixed, batch") {
		t.Fatalf("error %v", err)
	}
}
