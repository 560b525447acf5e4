package httpapi

import (
	"math"
	"strconv"
	"testing"

	"github.com/sluice-iot/sluice/codec"
	"github.com/sluice-iot/sluice/kv"
)

func TestParseClaimRequest(t *testing.T) {
	f := func(body, wantKey string, wantMs int64) {
		t.Helper()
		got, err := parseClaimRequest([]byte(body), codec.Limits{})
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if got.SecretKey != wantKey || got.DurationMs != wantMs {
			t.Fatalf("%q: got %q %d, want %q %d", body, got.SecretKey, got.DurationMs, wantKey, wantMs)
		}
	}
	f(``, "", 0)
	f(" \n", "", 0)
	f(`null`, "", 0)
	f(`{}`, "", 0)
	f(`{"secretKey":"value","durationMs":60000}`, "value", 60000)
	f(`{ "secretKey" : "a\"b" , "durationMs" : 1 }`, `a"b`, 1)
	f(`{"secretKey":null,"durationMs":null}`, "", 0)
	f(`{"secretKey":123}`, "123", 0)
	f(`{"secretKey":true}`, "true", 0)
	f(`{"durationMs":"5000"}`, "", 5000)
	f(`{"durationMs":6e4}`, "", 60000)
	f(`{"durationMs":60000.0}`, "", 60000)
	f(`{"durationMs":-5}`, "", -5)
	f(`{"durationMs":99999999999999999999}`, "", math.MaxInt64)
	f(`{"durationMs":1e400}`, "", math.MaxInt64)
	f(`{"durationMs":-1e400}`, "", math.MinInt64)
	f(`{"other":{"nested":[1,2,3]},"secretKey":"k"}`, "k", 0)

	bad := func(body string) {
		t.Helper()
		if _, err := parseClaimRequest([]byte(body), codec.Limits{}); err == nil {
			t.Fatalf("%q: no error", body)
		}
	}
	bad(`{`)
	bad(`[]`)
	bad(`"secret"`)
	bad(`42`)
	bad(`{"secretKey":{}}`)
	bad(`{"secretKey":[]}`)
	bad(`{"durationMs":1.5}`)
	bad(`{"durationMs":"1.5"}`)
	bad(`{"durationMs":"Inf"}`)
	bad(`{"durationMs":true}`)
	bad(`{"durationMs":{}}`)
	bad(`{"secretKey":"a"} trailing`)
}

// FuzzParseClaimRequest: any body either parses or is an error, never a panic,
// and a parsed body parses the same again from its fields.
func FuzzParseClaimRequest(f *testing.F) {
	for _, s := range []string{``, `null`, `{}`, `{"secretKey":"value","durationMs":60000}`,
		`{"secretKey":1,"durationMs":"5"}`, `{"durationMs":1e400}`, `{"secretKey":"\u0000"}`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parseClaimRequest(body, codec.Limits{})
		if err != nil {
			return
		}
		again, err := parseClaimRequest([]byte(`{"secretKey":`+string(kv.AppendJSONString(nil, req.SecretKey))+
			`,"durationMs":`+strconv.FormatInt(req.DurationMs, 10)+`}`), codec.Limits{})
		if err != nil || again != req {
			t.Fatalf("%q parsed as %+v, its re-encoding as %+v (%v)", body, req, again, err)
		}
	})
}
