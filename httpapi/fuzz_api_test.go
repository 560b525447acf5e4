package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/ingest"
	"github.com/sluice-iot/sluice/storage/embedded"
)

// fuzzRoutes are the request targets FuzzAPI drives: every parser of outside input
// behind them (bodies, path ids, query parameters) sees the fuzzer's bytes. Routes
// that wait by design (long polls, RPC calls, rule scripts) are left out.
// {tok} {dev} {cust} are replaced with real ids, {x} with the fuzzed path part.
var fuzzRoutes = []struct{ method, path string }{
	{"POST", "/api/v1/{tok}/telemetry"},
	{"POST", "/api/v1/{tok}/attributes"},
	{"GET", "/api/v1/{tok}/attributes"},
	{"POST", "/api/v1/{tok}/rpc/{x}"},
	{"POST", "/api/v1/{tok}/claim"},
	{"GET", "/api/v1/{tok}/firmware"},
	{"POST", "/api/v1/provision"},
	{"POST", "/api/auth/login"},
	{"POST", "/api/auth/token"},
	{"POST", "/api/device"},
	{"GET", "/api/device/{x}"},
	{"GET", "/api/tenant/devices"},
	{"POST", "/api/device/credentials"},
	{"POST", "/api/deviceProfile"},
	{"POST", "/api/customer"},
	{"POST", "/api/user"},
	{"POST", "/api/customer/device/{x}/claim"},
	{"GET", "/api/plugins/telemetry/DEVICE/{dev}/values/timeseries"},
	{"GET", "/api/plugins/telemetry/{x}/{dev}/values/attributes"},
	{"POST", "/api/plugins/telemetry/DEVICE/{dev}/timeseries/ANY"},
	{"POST", "/api/plugins/telemetry/DEVICE/{dev}/{x}"},
	{"DELETE", "/api/plugins/telemetry/DEVICE/{dev}/timeseries/delete"},
	{"GET", "/api/rpc/persistent/device/{dev}"},
	{"POST", "/api/otaPackage"},
	{"GET", "/api/otaPackages"},
	{"POST", "/api/analytics/view"},
	{"GET", "/api/analytics/views"},
	{"POST", "/apiAnalytics/publicApi/buildReport"},
	{"POST", "/api/apiKey"},
}

type fuzzAPI struct {
	handler fasthttp.RequestHandler
	demo    engine.BootstrapResult
	jwt     string
}

// fuzzTarget builds a front end over an embedded store with the demo data.
func fuzzTarget(f *testing.F) *fuzzAPI {
	db, err := embedded.Open(f.TempDir(), embedded.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	eng := engine.New(db, engine.Config{JWTSigningKey: []byte("fuzz-key-fuzz-key-fuzz-key-fuzz-key"), BcryptCost: bcrypt.MinCost})
	demo, err := eng.Bootstrap(context.Background(), true, "")
	if err != nil {
		f.Fatal(err)
	}
	jwt, _, err := eng.Login(context.Background(), engine.DemoTenantAdminEmail, "tenant")
	if err != nil {
		f.Fatal(err)
	}
	api := New(Config{MaxBodySize: 1 << 16, ReportThreads: 1, ReportQueue: 1}, eng, ingest.NewWriter(db, ingest.Config{}),
		slog.New(slog.DiscardHandler), nil)
	return &fuzzAPI{handler: api.Handler(), demo: demo, jwt: jwt}
}

// FuzzAPI sends arbitrary bodies, path parts and query strings to the routes of
// fuzzRoutes, as the tenant administrator. Whatever arrives, the node answers: no
// 500 (a panic is one), and every error is the JSON error body.
func FuzzAPI(f *testing.F) {
	seeds := []struct {
		route       uint8
		part, query string
		body        string
	}{
		{0, "", "", `{"temperature":42}`},
		{0, "", "", `[{"ts":1,"values":{"a":1}}]`},
		{1, "", "", `{"fw":"1.0"}`},
		{2, "", "clientKeys=a,b&sharedKeys=c", ""},
		{3, "7", "", `{"ok":true}`},
		{4, "", "", `{"secretKey":"s","durationMs":60000}`},
		{5, "", "title=fw&version=1&size=10&chunk=2", ""},
		{6, "", "", `{"provisionDeviceKey":"k","provisionDeviceSecret":"s","deviceName":"d"}`},
		{7, "", "", `{"username":"tenant@thingsboard.org","password":"x"}`},
		{9, "", "", `{"name":"fz","type":"default","label":"l"}`},
		{10, "not-a-uuid", "", ""},
		{11, "", "pageSize=10&page=0&textSearch=a&sortProperty=name&sortOrder=DESC", ""},
		{17, "", "keys=a,b&startTs=0&endTs=100&agg=AVG&interval=10&limit=5&orderBy=ASC", ""},
		{18, "DEVICE", "keys=a", ""},
		{19, "", "", `{"ts":1,"values":{"a":{"b":[1,2]}}}`},
		{20, "SHARED_SCOPE", "", `{"x":1}`},
		{21, "", "keys=a&startTs=0&endTs=10&deleteAllDataForKeys=false&deleteLatest=true", ""},
		{22, "", "pageSize=10&page=0&rpcStatus=QUEUED", ""},
		{23, "", "", `{"title":"fw","version":"1","type":"FIRMWARE"}`},
		{25, "", "", `{"name":"v","source":{"deviceProfile":"default"},"fields":[{"label":"D","source":"ENTITY_NAME"}]}`},
		{27, "", "", `{"viewConfigId":"x","filters":[{"name":"a","values":["b"]}]}`},
	}
	for _, s := range seeds {
		f.Add(s.route, s.part, s.query, []byte(s.body))
	}
	a := fuzzTarget(f) // before Fuzz: each fuzzing process builds its own
	f.Fuzz(func(t *testing.T, route uint8, part, query string, body []byte) {
		if len(body) > 4096 || len(part) > 256 || len(query) > 1024 {
			return // the limits themselves are tested elsewhere; keep executions fast
		}
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		path := strings.NewReplacer("{tok}", a.demo.DemoDeviceToken, "{dev}", a.demo.DemoDeviceID.String(),
			"{x}", part).Replace(rt.path)
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(rt.method)
		ctx.Request.SetRequestURI(path + "?" + query)
		ctx.Request.Header.Set("X-Authorization", "Bearer "+a.jwt)
		ctx.Request.Header.Set("jwt", a.jwt)
		ctx.Request.Header.SetContentType("application/json")
		ctx.Request.SetBody(body)
		a.handler(&ctx)

		status := ctx.Response.StatusCode()
		if status >= 500 {
			t.Fatalf("%s %q %q: %d %s", rt.method, path, query, status, ctx.Response.Body())
		}
		if status >= 400 {
			var e struct {
				Status    int
				Message   string
				ErrorCode *int
			}
			if err := json.Unmarshal(ctx.Response.Body(), &e); err != nil || e.Status != status || e.ErrorCode == nil {
				t.Fatalf("%s %q %q: %d is not the JSON error body: %q", rt.method, path, query, status, ctx.Response.Body())
			}
		}
	})
}
