package httpapi

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
	"github.com/sluice-iot/sluice/storage"
)

// Parser-level fuzz targets: query parameters and path parts, the Range header,
// and the REST request bodies. Each runs without storage, so the fuzzer reaches
// thousands of executions a second; FuzzAPI drives the same parsers through the
// routes. Rule and analytics bodies have their own targets beside their code.

// checkRefused asserts that a parser that returned false answered 400 with the
// JSON error body, and clears the response for the next parser.
func checkRefused(t *testing.T, ctx *fasthttp.RequestCtx, what string) {
	t.Helper()
	var e struct {
		Status    int
		Message   string
		ErrorCode *int
	}
	if st := ctx.Response.StatusCode(); st != fasthttp.StatusBadRequest {
		t.Fatalf("%s: refused with %d, want 400", what, st)
	}
	if err := json.Unmarshal(ctx.Response.Body(), &e); err != nil || e.Status != 400 || e.Message == "" || e.ErrorCode == nil {
		t.Fatalf("%s: not the JSON error body: %q", what, ctx.Response.Body())
	}
	ctx.Response.Reset()
}

// checkUntouched asserts that a parser that accepted its input wrote nothing.
func checkUntouched(t *testing.T, ctx *fasthttp.RequestCtx, what string) {
	t.Helper()
	if st := ctx.Response.StatusCode(); st != fasthttp.StatusOK || len(ctx.Response.Body()) != 0 {
		t.Fatalf("%s: accepted but answered %d %q", what, st, ctx.Response.Body())
	}
}

// FuzzQueryParams gives one query string and one path part to every parser of
// query parameters and path segments: int64Param (startTs, endTs, interval, limit),
// pollTimeout, keysParam, pageLink, intParam (OTA size/chunk), requiredParam,
// boolParam, ParseAgg, pathID, scopesParam and writableScope. Each either accepts
// with a value that agrees with the raw text, or answers 400 with the JSON body.
func FuzzQueryParams(f *testing.F) {
	for _, s := range [][2]string{
		{"keys=temperature,humidity&startTs=1609459200000&endTs=1609545600000&interval=60000&agg=AVG&limit=100&orderBy=ASC&useStrictDataTypes=true", "DEVICE"},
		{"keys=a&key=b&key=c,%20d&startTs=0&endTs=9223372036854775807", "SHARED_SCOPE"},
		{"startTs=-9223372036854775808&endTs=99999999999999999999", "SERVER_SCOPE"},
		{"timeout=30000", "CLIENT_SCOPE"},
		{"timeout=-1", "NO_SUCH_SCOPE"},
		{"timeout=9223372036854775807", ""},
		{"timeout=soon", "784f394c-42b6-435a-983c-b7beff2784f9"},
		{"pageSize=10&page=0&textSearch=x&sortProperty=name&sortOrder=DESC", "784F394C-42B6-435A-983C-B7BEFF2784F9"},
		{"pageSize=-1&page=abc", "{784f394c-42b6-435a-983c-b7beff2784f9}"},
		{"pageSize=2147483648&page=0", "urn:uuid:784f394c-42b6-435a-983c-b7beff2784f9"},
		{"title=fw&version=1.0&size=1024&chunk=3", "784f394c42b6435a983cb7beff2784f9"},
		{"title=&size=-1&chunk=1e3", "13814000-1dd2-11b2-8080-808080808080"},
		{"clientKeys=a,,b,%20&sharedKeys=%ff", "not-a-uuid"},
		{"agg=MEDIAN&interval=abc&limit=x", " DEVICE"},
		{"keys=%zz&&&=&a=b=c", "SHARED_SCOPE\x00"},
	} {
		f.Add(s[0], s[1])
	}
	s := &Server{cfg: Config{LongPollMaxTimeout: 300 * time.Second}}
	var ctx fasthttp.RequestCtx // reused: a fuzz function runs one input at a time
	f.Fuzz(func(t *testing.T, query, part string) {
		if len(query) > 1024 || len(part) > 256 {
			return // long inputs only slow the fuzzer and its minimizer down
		}
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.ResetUserValues()
		ctx.Request.SetRequestURI("/q?" + query)
		ctx.SetUserValue("id", part)
		ctx.SetUserValue("scope", part)
		args := ctx.QueryArgs()

		for _, name := range []string{"startTs", "endTs", "interval", "limit"} {
			raw := string(args.Peek(name))
			n, ok := int64Param(&ctx, name, 42)
			if !ok {
				checkRefused(t, &ctx, "int64Param "+name+"="+raw)
				continue
			}
			checkUntouched(t, &ctx, "int64Param "+name)
			if want, err := strconv.ParseInt(raw, 10, 64); raw == "" && n != 42 || raw != "" && (err != nil || n != want) {
				t.Fatalf("int64Param %s=%q: %d", name, raw, n)
			}
		}

		if d, ok := s.pollTimeout(&ctx); !ok {
			checkRefused(t, &ctx, "pollTimeout")
		} else {
			checkUntouched(t, &ctx, "pollTimeout")
			if d <= 0 || d > s.cfg.LongPollMaxTimeout {
				t.Fatalf("pollTimeout %q: %v", args.Peek("timeout"), d)
			}
			if len(args.Peek("timeout")) == 0 && d != defaultPollTimeout {
				t.Fatalf("no timeout: %v, want the default", d)
			}
		}

		// Keys are never empty; a comma list splits at every comma, a repeated
		// key parameter is one key whole; keysParam names each key once.
		for i, list := range [][]string{keysParam(args), keyList(args, "clientKeys"), keyList(args, "sharedKeys")} {
			for j, k := range list {
				if k == "" || i > 0 && strings.Contains(k, ",") || i == 0 && slices.Contains(list[:j], k) {
					t.Fatalf("key list of %q has key %q", query, k)
				}
			}
		}

		if pl, ok := pageLink(&ctx); !ok {
			checkRefused(t, &ctx, "pageLink")
		} else {
			checkUntouched(t, &ctx, "pageLink")
			size, err1 := strconv.Atoi(string(args.Peek("pageSize")))
			page, err2 := strconv.Atoi(string(args.Peek("page")))
			if err1 != nil || err2 != nil || pl.PageSize != size || pl.Page != page {
				t.Fatalf("pageLink %q: %+v", query, pl)
			}
		}

		for _, name := range []string{"size", "chunk"} {
			if n, ok := intParam(&ctx, name); !ok {
				checkRefused(t, &ctx, "intParam "+name)
			} else if checkUntouched(t, &ctx, "intParam "+name); n < math.MinInt32 || n > math.MaxInt32 {
				t.Fatalf("intParam %s=%q: %d", name, args.Peek(name), n)
			}
		}

		if v, ok := requiredParam(&ctx, "title"); !ok {
			checkRefused(t, &ctx, "requiredParam")
		} else if checkUntouched(t, &ctx, "requiredParam"); v != string(args.Peek("title")) {
			t.Fatalf("requiredParam title of %q: %q", query, v)
		}

		if b, ok := boolParam(&ctx, "useStrictDataTypes", false); !ok {
			checkRefused(t, &ctx, "boolParam")
		} else if checkUntouched(t, &ctx, "boolParam"); b != slices.Contains([]string{"true", "on", "yes", "1"}, strings.ToLower(string(args.Peek("useStrictDataTypes")))) {
			t.Fatalf("boolParam of %q: %v", query, b)
		}

		if agg, ok := engine.ParseAgg(string(args.Peek("agg"))); ok && (agg < storage.AggNone || agg > storage.AggCount) {
			t.Fatalf("ParseAgg %q: %d", args.Peek("agg"), agg)
		}

		if id, ok := s.pathID(&ctx, "id"); !ok {
			checkRefused(t, &ctx, "pathID "+part)
		} else if checkUntouched(t, &ctx, "pathID"); !strings.EqualFold(id.String(), part) {
			t.Fatalf("pathID %q: %s", part, id)
		}

		if sc, ok := scopesParam(&ctx); !ok {
			checkRefused(t, &ctx, "scopesParam "+part)
		} else if checkUntouched(t, &ctx, "scopesParam"); len(sc) == 0 || part != "" && (len(sc) != 1 || sc[0].String() != part) {
			t.Fatalf("scopesParam %q: %v", part, sc)
		}

		if sc, ok := writableScope(&ctx, part); !ok {
			checkRefused(t, &ctx, "writableScope "+part)
		} else if checkUntouched(t, &ctx, "writableScope"); sc != storage.SharedScope && sc != storage.ServerScope {
			t.Fatalf("writableScope %q: %v", part, sc)
		}
	})
}

// FuzzParseRange: any Range header and body size give a range inside the body,
// an unsatisfiable one (from past the end, or to before from), or "no range".
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"bytes=0-99", "bytes=100-", "bytes=-5", "bytes=-0", "bytes=5-3", "bytes=0-1,3-4",
		"bytes = 1-2", "items=0-1", "bytes=-9223372036854775808", "bytes=9223372036854775807-", "bytes=1--2", ""} {
		f.Add(s, int64(100))
		f.Add(s, int64(0))
	}
	f.Fuzz(func(t *testing.T, spec string, size int64) {
		if size < 0 || len(spec) > 256 {
			return // a package has a size ≥ 0; the header is bounded by fasthttp
		}
		from, to, ok := parseRange(spec, size)
		if !ok {
			return
		}
		if from < 0 {
			t.Fatalf("%q of %d: from %d", spec, size, from)
		}
		if from < size && to >= from && to > size-1 {
			t.Fatalf("%q of %d: [%d, %d] runs past the end", spec, size, from, to)
		}
	})
}

// restBodies are the request types that REST handlers decode with readJSON (or,
// for login and refresh, with the same decoder), and the compat examples of each.
var restBodies = []struct {
	name  string
	new   func() any
	seeds []string
}{
	{"login", func() any { return new(loginRequest) }, []string{`{"username":"tenant@thingsboard.org","password":"tenant"}`}},
	{"refresh", func() any { return new(struct{ RefreshToken string }) }, []string{`{"refreshToken":"eyJ.x.y"}`}},
	{"provision", func() any { return new(engine.ProvisionRequest) }, []string{
		`{"deviceName":"DEVICE_NAME","provisionDeviceKey":"u7piawkboq8v32dmcmpp","provisionDeviceSecret":"jpmwdn8ptlswmf4m29bw"}`,
		`{"deviceName":"d","provisionDeviceKey":"k","provisionDeviceSecret":"s","credentialsType":"ACCESS_TOKEN","token":"t"}`}},
	{"rpc", func() any { return new(engine.RPCRequest) }, []string{
		`{"method":"setGpio","params":{"pin":7,"value":1},"timeout":5000,"expirationTime":0,"persistent":false,"retries":null,"additionalInfo":{}}`}},
	{"device", func() any { return new(engine.Device) }, []string{
		`{"name":"sensor-1","type":"default","label":"l"}`,
		`{"id":{"entityType":"DEVICE","id":"784f394c-42b6-435a-983c-b7beff2784f9"},"name":"n","deviceProfileId":{"entityType":"DEVICE_PROFILE","id":"13814000-1dd2-11b2-8080-808080808080"},"additionalInfo":{"description":""}}`}},
	{"credentials", func() any { return new(engine.DeviceCredentials) }, []string{
		`{"deviceId":{"entityType":"DEVICE","id":"784f394c-42b6-435a-983c-b7beff2784f9"},"credentialsType":"ACCESS_TOKEN","credentialsId":"tok"}`}},
	{"deviceProfile", func() any { return new(engine.DeviceProfile) }, []string{
		`{"name":"p","type":"DEFAULT","transportType":"DEFAULT","provisionType":"ALLOW_CREATE_NEW_DEVICES","profileData":{"provisionConfiguration":{"provisionDeviceKey":"k","provisionDeviceSecret":"s"}}}`}},
	{"tenant", func() any { return new(engine.Tenant) }, []string{`{"title":"t","region":"Global"}`}},
	{"customer", func() any { return new(engine.Customer) }, []string{`{"title":"c","email":"c@x.org"}`}},
	{"user", func() any { return new(engine.User) }, []string{`{"email":"u@x.org","authority":"TENANT_ADMIN","firstName":"F"}`}},
	{"apiKey", func() any { return new(engine.APIKeyRequest) }, []string{`{"description":"ci","expirationTime":0,"enabled":true}`}},
	{"otaPackage", func() any { return new(engine.SaveOtaPackageInfoRequest) }, []string{`{"title":"fw","version":"1.0","type":"FIRMWARE","deviceProfileId":{"entityType":"DEVICE_PROFILE","id":"784f394c-42b6-435a-983c-b7beff2784f9"},"isURL":false}`}},
	{"changePassword", func() any { return new(changePasswordRequest) }, []string{`{"currentPassword":"a","newPassword":"b"}`}},
	{"activate", func() any { return new(activateRequest) }, []string{`{"activateToken":"x","password":"p"}`}},
	{"view", func() any { return new(engine.View) }, []string{`{"id":{"entityType":"ANALYTICS_VIEW","id":"784f394c-42b6-435a-983c-b7beff2784f9"},` +
		`"name":"Monthly energy by building","type":"TABLE","source":{"deviceProfile":"energy-meter"},"fields":[` +
		`{"label":"Building","source":"ATTRIBUTE","key":"building","scope":"SERVER_SCOPE"},{"label":"Date","source":"DATE","grouping":"YEARMONTH"},` +
		`{"label":"energyUsage","source":"TELEMETRY","key":"energy","aggregation":"SUM"}],"filters":[{"name":"building",` +
		`"field":{"source":"ATTRIBUTE","key":"building","scope":"SERVER_SCOPE"},"condition":"ONE_OF","values":[]}],` +
		`"range":{"type":"RELATIVE","preset":"LAST_30_DAYS"},"timeZone":"Europe/Kyiv","sort":[{"label":"Date","order":"ASC"}]}`}},
	{"report", func() any { return new(engine.ReportRequest) }, []string{
		`{"viewConfigId":"784f394c-42b6-435a-983c-b7beff2784f9","rangeStartTs":0,"rangeEndTs":0,"filters":{"Building":[],"Floor":["1"]}}`}},
	{"tenantProfile", func() any { return new(engine.TenantProfile) }, []string{`{"name":"Default","default":true,` +
		`"profileData":{"configuration":{"type":"DEFAULT","transportDeviceTelemetryMsgRateLimit":"10:1,300:60"}}}`}},
	{"rpcRule", func() any { return new(engine.RPCRuleInput) }, []string{`{"method":"getTime","script":"return Date.now();"}`}},
}

// FuzzRESTBody feeds any bytes to readJSON as each REST request type. A body is
// refused with 400 and the JSON error body, or decodes to a value that writeJSON
// can encode (handlers answer saved entities with it) and that decodes again to
// the same encoding.
func FuzzRESTBody(f *testing.F) {
	hostile := []string{``, `null`, `[]`, `"s"`, `{"a":`, `{} x`, `{"name":NaN}`, `{"name":1e400}`, "{\"name\":\"\xff\"}",
		`{"id":{"id":"not-a-uuid"}}`, `{"additionalInfo":{"a":[{"b":null}]}}`, strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40)}
	for i, b := range restBodies {
		for _, s := range append(b.seeds, hostile...) {
			f.Add(uint8(i), []byte(s))
		}
	}
	s := &Server{}
	var ctx fasthttp.RequestCtx
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		if len(body) > 4096 {
			return // body limits are tested over HTTP; long inputs only slow the minimizer
		}
		b := restBodies[int(kind)%len(restBodies)]
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.SetBody(body)
		v := b.new()
		if !s.readJSON(&ctx, v) {
			checkRefused(t, &ctx, b.name)
			return
		}
		checkUntouched(t, &ctx, b.name)
		out, err := sonic.Marshal(v)
		if err != nil {
			t.Fatalf("%s %q decodes to %+v, which does not encode: %v", b.name, body, v, err)
		}
		again := b.new()
		if err := sonic.Unmarshal(out, again); err != nil {
			t.Fatalf("%s %q: its encoding %q does not decode: %v", b.name, body, out, err)
		}
		if out2, _ := sonic.Marshal(again); !bytes.Equal(out, out2) && !reflect.DeepEqual(v, again) {
			t.Fatalf("%s %q: encodes as %q, then as %q", b.name, body, out, out2)
		}
	})
}
