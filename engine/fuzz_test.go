package engine

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bytedance/sonic"
	"github.com/google/uuid"
)

// FuzzRPCRequest drives the body of a server-side RPC call (POST /api/rpc/{oneway,
// twoway}/{deviceId} and the V1 paths) from the bytes to the record a device would
// be sent: decoded as the REST handler decodes it (sonic into RPCRequest), then
// newRPC. Whatever the body, the call is a 400 *Error or a record whose stored
// form and device body are JSON, with the request's method, compact params and
// an expiration time. Seeds are the compat §2 examples.
func FuzzRPCRequest(f *testing.F) {
	for _, s := range []string{
		`{"method":"setGpio","params":{"pin":7,"value":1},"timeout":5000,"expirationTime":0,"persistent":false,"retries":null,"additionalInfo":{}}`,
		`{"method":"getTemperature","params":{}}`,
		`{"method":"reboot"}`,
		`{"method":"m","params":[1, 2 ,{"a" : "\u00e9\""}],"persistent":true,"retries":3,"additionalInfo":{"k":"v"}}`,
		`{"method":"m","params":"text","timeout":1}`,
		`{"method":"m","expirationTime":4102444800000}`,
		`{"method":"m","timeout":-1}`,
		`{"method":"m","timeout":-9223372036855}`,
		`{"method":"m","timeout":9223372036854775807}`,
		`{"method":"m","additionalInfo":null}`,
		`{"method":" "}`,
		`{"params":{}}`,
		`{"method":"\ud800"}`,
		`{"method":"m","params":{"a":}`,
		`{"method":"m","timeout":1e400}`,
		`[]`, `null`, ``,
	} {
		f.Add([]byte(s), false)
	}
	e := New(nil, Config{JWTSigningKey: []byte("fuzz-key-fuzz-key-fuzz-key-fuzz-key")})
	now := time.UnixMilli(1_700_000_000_000)
	e.now = func() time.Time { return now }
	dev := &Device{ID: EntityID{EntityType: "DEVICE", ID: uuid.New()}, Tenant: EntityID{EntityType: "TENANT", ID: uuid.New()}}
	f.Fuzz(func(t *testing.T, body []byte, oneway bool) {
		if len(body) > 4096 {
			return // the body limit is tested over HTTP; long inputs only slow the minimizer
		}
		var req RPCRequest
		if sonic.Unmarshal(body, &req) != nil {
			return // the handler's 400 "Invalid request body"
		}
		r, err := e.newRPC(dev, oneway, &req)
		if err != nil {
			var ee *Error
			if !errors.As(err, &ee) || ee.Code != CodeBadRequestParams {
				t.Fatalf("%q: %v, want a 400 *Error", body, err)
			}
			return
		}
		if strings.TrimSpace(r.Method) == "" || r.Method != req.Method {
			t.Fatalf("%q: method %q", body, r.Method)
		}
		if !json.Valid(r.Params) || len(r.Params) == 0 {
			t.Fatalf("%q: params %q are not JSON", body, r.Params)
		}
		if r.ExpirationTime <= 0 {
			t.Fatalf("%q: expirationTime %d", body, r.ExpirationTime)
		}
		if req.ExpirationTime == nil || *req.ExpirationTime <= 0 {
			if min := now.Add(e.cfg.RPCMinTimeout).UnixMilli(); r.ExpirationTime < min {
				t.Fatalf("%q: expires at %d, before the minimum timeout (%d)", body, r.ExpirationTime, min)
			}
		}
		if r.Oneway != oneway || r.Persistent != req.Persistent || r.Status != RPCQueued {
			t.Fatalf("%q: record %+v", body, r)
		}
		// Stored and read back as putRecord and decodeRecord do.
		stored, err := sonic.Marshal(r)
		if err != nil {
			t.Fatalf("%q: the record does not encode: %v", body, err)
		}
		var back rpcRecord
		if err := sonic.Unmarshal(stored, &back); err != nil || back.Method != r.Method || back.ExpirationTime != r.ExpirationTime {
			t.Fatalf("%q: stored %s reads back as %+v (%v)", body, stored, back, err)
		}
		if sent := deviceRPCBody(r); !json.Valid(sent) {
			t.Fatalf("%q: device body %q is not JSON", body, sent)
		}
	})
}

// FuzzAuthenticate: no X-Authorization value panics the engine, and none
// authenticates as anyone but the holder of a real credential. The seeds are a
// tenant admin's access and refresh tokens and API key, and forgeries of them.
func FuzzAuthenticate(f *testing.F) {
	te := newTestEngine(f)
	ctx := context.Background()
	access, refresh, err := te.Login(ctx, DemoTenantAdminEmail, "tenant")
	if err != nil {
		f.Fatal(err)
	}
	admin, err := te.Authenticate(ctx, "Bearer "+access)
	if err != nil {
		f.Fatal(err)
	}
	key, err := te.SaveAPIKey(ctx, admin, &APIKeyRequest{Description: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	parts := strings.Split(access, ".")
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	for _, s := range []string{
		"Bearer " + access, "Bearer  " + access + " ", "bearer " + access, "Bearer " + refresh,
		"ApiKey " + *key.Value, "ApiKey " + strings.ToUpper(*key.Value), "ApiKey " + *key.Value + "x",
		"Bearer " + none + "." + parts[1] + ".", "Bearer " + parts[0] + "." + parts[1] + ".",
		"Bearer " + parts[0] + "." + parts[1] + "." + parts[2][:len(parts[2])-2],
		"Bearer ", "ApiKey ", "", "Bearer a.b.c", "Bearer ....", "Basic dGVuYW50OnRlbmFudA==",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		p, err := te.Authenticate(ctx, header)
		if err != nil {
			if p != nil {
				t.Fatalf("%q: principal %+v with error %v", header, p, err)
			}
			return
		}
		if p == nil || p.UserID != admin.UserID || p.TenantID != admin.TenantID || p.Authority != admin.Authority {
			t.Fatalf("%q authenticated as %+v, not as the credential's holder %+v", header, p, admin)
		}
	})
}

// FuzzParseLimits: a tenant profile's configuration (what a system administrator
// posts) and its rate-limit strings parse or fail without a panic, and a parsed
// rate limit gives buckets that answer with a wait, never a negative one.
func FuzzParseLimits(f *testing.F) {
	for _, s := range []string{
		`{"transportDeviceTelemetryMsgRateLimit":"10:1,300:60","maxDevices":5}`,
		`{"transportTenantTelemetryDataPointsRateLimit":" 1:1 , 2:2 "}`,
		`null`, ``, `[]`, `{"maxDevices":-1}`, `{"transportDeviceTelemetryMsgRateLimit":"0:1"}`,
		`{"transportDeviceTelemetryMsgRateLimit":"9223372036854775807:3153600000"}`,
		`{"transportDeviceTelemetryMsgRateLimit":12}`,
	} {
		f.Add(s, "10:1,300:60")
	}
	f.Add(``, `1:1,`)
	f.Add(``, `:`)
	f.Fuzz(func(t *testing.T, conf, rate string) {
		if _, err := parseLimits(json.RawMessage(conf)); err != nil && err.Error() == "" {
			t.Fatalf("%q: empty error", conf)
		}
		l, err := parseRateLimit(rate)
		if err != nil || l == nil {
			return
		}
		b := newBucket(l, 0)
		for i := range 3 {
			if _, wait := b.take(int64(i)*int64(time.Millisecond), 1); wait < 0 {
				t.Fatalf("%q: negative wait %v", rate, wait)
			}
		}
	})
}
