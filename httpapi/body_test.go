package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/proto"

	sluicepb "github.com/sluice-iot/sluice/codec/proto"
	"github.com/sluice-iot/sluice/engine"
)

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zstded(t testing.TB, b []byte) []byte {
	t.Helper()
	w, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	return w.EncodeAll(b, nil)
}

// zstdStream compresses b as a streaming encoder does: no content size, the
// given window.
func zstdStream(t testing.TB, b []byte, window int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, zstd.WithWindowSize(window))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.ReadFrom(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecompress(t *testing.T) {
	plain := []byte(strings.Repeat(`{"temperature":21.5}`, 100))
	f := func(enc string, body []byte, limit int, want []byte, wantErr string) {
		t.Helper()
		got, err := decompress([]byte("old"), []byte(enc), body, limit, nil)
		switch {
		case wantErr == "" && err != nil:
			t.Fatalf("%s: %v", enc, err)
		case wantErr == "" && !bytes.Equal(got, append([]byte("old"), want...)):
			t.Fatalf("%s: got %d bytes, want %d", enc, len(got), len(want)+3)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Fatalf("%s: error %v, want %q", enc, err, wantErr)
		case wantErr != "" && string(got) != "old":
			t.Fatalf("%s: dst changed on error: %q", enc, got)
		}
	}
	gz, zs := gzipped(t, plain), zstded(t, plain)
	f("gzip", gz, len(plain), plain, "")
	f("GZIP ", gz, len(plain), plain, "")
	f("x-gzip", gz, len(plain), plain, "")
	f("gzip", append(gz, gz...), 2*len(plain), append(plain, plain...), "") // concatenated members
	f("zstd", zs, len(plain), plain, "")
	f("Zstd", zs, 1<<20, plain, "")
	f("gzip", gzipped(t, nil), 10, nil, "")
	f("gzip", gz, len(plain)-1, nil, "exceeds the limit")
	f("zstd", zs, len(plain)-1, nil, "exceeds the limit")
	f("gzip", gz[:len(gz)-3], 1<<20, nil, "Invalid gzip body: unexpected EOF")
	f("gzip", plain, 1<<20, nil, "Invalid gzip body: gzip: invalid header")
	f("gzip", nil, 1<<20, nil, "Invalid gzip body: EOF")
	bad := bytes.Clone(gz)
	bad[len(bad)-5] ^= 0xff // CRC-32 of the data
	f("gzip", bad, 1<<20, nil, "Invalid gzip body: gzip: invalid checksum")
	f("zstd", zstdStream(t, plain, 1<<20), 1<<20, plain, "")
	f("zstd", zs[:len(zs)-3], 1<<20, nil, "Invalid zstd body")
	f("zstd", plain, 1<<20, nil, "Invalid zstd body")
	f("br", gz, 1<<20, nil, "Content-Encoding 'br' is not supported; supported encodings: gzip, zstd, identity")
	f("gzip, zstd", gz, 1<<20, nil, "Content-Encoding 'gzip, zstd' is not supported")
}

// TestZipBomb inflates 200 MB of zeros against a 1 MiB limit: it must stop
// at the limit and allocate a few times that, not the whole body. Measured:
// gzip ~2.3 MiB (the output buffer, grown by doubling to limit+1), zstd with a
// 1 MiB window ~4.6 MiB (plus the window twice), ~5.4 MiB with a new decoder
// (-race drops pooled ones), zstd with a window past the limit ~20 KiB.
func TestZipBomb(t *testing.T) {
	const limit = 1 << 20
	zeros := make([]byte, 200<<20)
	for _, c := range []struct {
		enc  string
		body []byte
	}{{"gzip", gzipped(t, zeros)}, {"zstd", zstded(t, zeros)}, {"zstd", zstdStream(t, zeros, limit)}} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := decompress(nil, []byte(c.enc), c.body, limit, nil)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, errTooLarge) {
			t.Fatalf("%s: %v", c.enc, err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 6*limit {
			t.Fatalf("%s bomb (%d bytes compressed): %d bytes allocated for a %d-byte limit", c.enc, len(c.body), alloc, limit)
		}
	}
}

func FuzzDecompress(f *testing.F) {
	for _, s := range []string{"", `{"a":1}`, strings.Repeat("x", 300)} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
		f.Add(gzipped(f, []byte(s)), false)
		f.Add(zstded(f, []byte(s)), true)
	}
	const limit = 256
	// One encoder of each kind for the whole run: building them per input (a
	// gzip writer allocates ~1 MB) made the fuzzer crawl at ~2k execs/s.
	zenc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		f.Fatal(err)
	}
	defer zenc.Close()
	gzPool := sync.Pool{New: func() any { return gzip.NewWriter(nil) }}
	gz := func(t testing.TB, b []byte) []byte {
		var buf bytes.Buffer
		w := gzPool.Get().(*gzip.Writer)
		defer gzPool.Put(w)
		w.Reset(&buf)
		w.Write(b)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	zs := func(_ testing.TB, b []byte) []byte { return zenc.EncodeAll(b, nil) }
	f.Fuzz(func(t *testing.T, data []byte, useZstd bool) {
		if len(data) > 4*limit {
			return // longer inputs only slow the fuzzer (and its minimizer) down
		}
		enc, pack := "gzip", gz
		if useZstd {
			enc, pack = "zstd", zs
		}
		// Any bytes: an error or at most limit bytes, never a panic.
		if got, err := decompress(nil, []byte(enc), data, limit, nil); err == nil && len(got) > limit {
			t.Fatalf("%d bytes past the %d limit", len(got), limit)
		}
		// A compressed body comes back whole, or is too large.
		got, err := decompress(nil, []byte(enc), pack(t, data), limit, nil)
		switch {
		case len(data) > limit && !errors.Is(err, errTooLarge):
			t.Fatalf("%d bytes: %v, want too large", len(data), err)
		case len(data) <= limit && (err != nil || !bytes.Equal(got, data)):
			t.Fatalf("round trip: %v", err)
		}
	})
}

// post sends body with the given headers ("Name: value") and returns the
// status and body.
func (n *testNode) post(path, auth string, body []byte, headers ...string) (int, []byte) {
	n.t.Helper()
	return n.send("POST", path, auth, body, headers...)
}

// send is post with another method.
func (n *testNode) send(method, path, auth string, body []byte, headers ...string) (int, []byte) {
	n.t.Helper()
	resp, out := n.exchange(method, path, auth, body, headers...)
	return resp.StatusCode, out
}

// exchange is send that returns the response, its headers for a look.
func (n *testNode) exchange(method, path, auth string, body []byte, headers ...string) (*http.Response, []byte) {
	n.t.Helper()
	req, err := http.NewRequest(method, n.URL+path, bytes.NewReader(body))
	if err != nil {
		n.t.Fatal(err)
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ": ")
		req.Header.Set(name, value)
	}
	if auth != "" {
		req.Header.Set("X-Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		n.t.Fatal(err)
	}
	return resp, out
}

// expectPost is post that checks the status and, for an error, the JSON
// error body and that its message contains msg.
func (n *testNode) expectPost(path, auth string, body []byte, status int, msg string, headers ...string) {
	n.t.Helper()
	got, out := n.post(path, auth, body, headers...)
	if got != status {
		n.t.Fatalf("POST %s %v: status %d, want %d: %s", path, headers, got, status, out)
	}
	if status >= 400 {
		var e apiError
		n.decode(out, &e)
		if e.Status != status || e.ErrorCode == 0 || e.Timestamp <= 0 || !strings.Contains(e.Message, msg) {
			n.t.Fatalf("POST %s %v: error body %s, want message with %q", path, headers, out, msg)
		}
	}
}

func TestCompressedBodies(t *testing.T) {
	n := startTestNode(t)
	auth := n.tenant()
	dev := n.Demo.DemoDeviceID.String()
	devTelemetry := "/api/v1/" + n.Demo.DemoDeviceToken + "/telemetry"
	devAttributes := "/api/v1/" + n.Demo.DemoDeviceToken + "/attributes"
	restTelemetry := "/api/plugins/telemetry/DEVICE/" + dev + "/timeseries/ANY"
	restAttributes := "/api/plugins/telemetry/DEVICE/" + dev + "/attributes/SERVER_SCOPE"
	json := "Content-Type: application/json"

	// 5,000 timestamped points in one gzip request, all read back.
	var b strings.Builder
	b.WriteByte('[')
	for i := range 5000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"ts":%d,"values":{"batch":%d}}`, 1700000000000+int64(i), i)
	}
	b.WriteByte(']')
	n.expectPost(devTelemetry, "", gzipped(t, []byte(b.String())), 200, "", json, "Content-Encoding: gzip")
	var hist map[string][]struct {
		Ts    int64 `json:"ts"`
		Value int64 `json:"value"`
	}
	n.decode(n.expect("GET", "/api/plugins/telemetry/DEVICE/"+dev+
		"/values/timeseries?keys=batch&startTs=0&endTs=9999999999999&limit=10000&orderBy=ASC&useStrictDataTypes=true", auth, nil, 200, ""), &hist)
	if pts := hist["batch"]; len(pts) != 5000 || pts[0].Ts != 1700000000000 || pts[4999].Value != 4999 {
		t.Fatalf("read back %d points", len(pts))
	}

	// Every write path takes gzip and zstd.
	n.expectPost(devTelemetry, "", zstded(t, []byte(`{"zt":1}`)), 200, "", "Content-Encoding: zstd")
	n.expectPost(devAttributes, "", gzipped(t, []byte(`{"fw":"v2.0"}`)), 200, "", "Content-Encoding: gzip")
	n.expectPost(restTelemetry, auth, zstded(t, []byte(`{"rt":2}`)), 200, "", json, "Content-Encoding: zstd")
	n.expectPost(restAttributes, auth, gzipped(t, []byte(`{"mode":"eco"}`)), 200, "", json, "Content-Encoding: gzip")
	latest := string(n.expect("GET", "/api/plugins/telemetry/DEVICE/"+dev+"/values/timeseries?keys=zt,rt&useStrictDataTypes=true", auth, nil, 200, ""))
	if !strings.Contains(latest, `"zt":[{"ts":`) || !strings.Contains(latest, `"value":1}]`) || !strings.Contains(latest, `"value":2}]`) {
		t.Fatalf("latest: %s", latest)
	}
	attrs := string(n.expect("GET", "/api/plugins/telemetry/DEVICE/"+dev+"/values/attributes?keys=fw,mode", auth, nil, 200, ""))
	if !strings.Contains(attrs, `"key":"fw","value":"v2.0"`) || !strings.Contains(attrs, `"key":"mode","value":"eco"`) {
		t.Fatalf("attributes: %s", attrs)
	}

	// A bomb stops at the limit of the node (1 MiB).
	bomb := gzipped(t, make([]byte, 64<<20))
	for _, path := range []string{devTelemetry, devAttributes} {
		n.expectPost(path, "", bomb, 413, "Payload size exceeds the limit of 1048576 bytes", "Content-Encoding: gzip")
	}
	n.expectPost(restTelemetry, auth, zstded(t, make([]byte, 64<<20)), 413, "Payload size exceeds the limit of 1048576 bytes", "Content-Encoding: zstd")
	n.expectPost(devTelemetry, "", []byte(`{"a":1}`), 415, "Content-Encoding 'br' is not supported", "Content-Encoding: br")
	n.expectPost(restAttributes, auth, []byte(`{"a":1}`), 400, "Invalid gzip body", "Content-Encoding: gzip")
	n.expectPost(devTelemetry, "", zstded(t, []byte(`{"a":`)), 400, "invalid JSON", "Content-Encoding: zstd")
}

func TestContentTypes(t *testing.T) {
	n := startTestNode(t)
	auth := n.tenant()
	dev := n.Demo.DemoDeviceID.String()
	devTelemetry := "/api/v1/" + n.Demo.DemoDeviceToken + "/telemetry"
	for i, ct := range []string{"", "application/json", "Application/JSON; charset=utf-8", "text/plain", "application/x-www-form-urlencoded"} {
		body := []byte(`{"ct` + strconv.Itoa(i) + `":1}`)
		if ct == "" {
			n.expectPost(devTelemetry, "", body, 200, "")
			continue
		}
		n.expectPost(devTelemetry, "", body, 200, "", "Content-Type: "+ct)
	}
	keys := string(n.expect("GET", "/api/plugins/telemetry/DEVICE/"+dev+"/keys/timeseries", auth, nil, 200, ""))
	for i := range 5 {
		if !strings.Contains(keys, `"ct`+strconv.Itoa(i)+`"`) {
			t.Fatalf("keys %s lack ct%d", keys, i)
		}
	}
	// Another type is JSON to the device API (ThingsBoard's takes any), 415 to REST.
	for _, path := range []string{devTelemetry, "/api/v1/" + n.Demo.DemoDeviceToken + "/attributes"} {
		n.expectPost(path, "", []byte(`{"x":1}`), 200, "", "Content-Type: application/xml")
		n.expectPost(path, "", []byte(`<a>1</a>`), 400, "", "Content-Type: application/xml")
	}
	n.expectPost("/api/plugins/telemetry/DEVICE/"+dev+"/timeseries/ANY", auth, []byte(`{}`), 415,
		"Content type 'text/csv' is not supported; supported types: application/json, application/protobuf, application/x-protobuf", "Content-Type: text/csv")
}

func pkv(key string, v any) *sluicepb.KeyValue {
	m := &sluicepb.KeyValue{Key: key}
	switch v := v.(type) {
	case bool:
		m.Value = &sluicepb.KeyValue_BoolV{BoolV: v}
	case int:
		m.Value = &sluicepb.KeyValue_LongV{LongV: int64(v)}
	case float64:
		m.Value = &sluicepb.KeyValue_DoubleV{DoubleV: v}
	case string:
		m.Value = &sluicepb.KeyValue_StringV{StringV: v}
	case json.RawMessage:
		m.Value = &sluicepb.KeyValue_JsonV{JsonV: string(v)}
	}
	return m
}

func TestProtobufBodies(t *testing.T) {
	n := startTestNode(t)
	auth := n.tenant()
	dev := n.Demo.DemoDeviceID.String()
	devTelemetry := "/api/v1/" + n.Demo.DemoDeviceToken + "/telemetry"
	pb := "Content-Type: application/x-protobuf"
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tel := marshal(&sluicepb.TelemetryRequest{Packs: []*sluicepb.TsKvList{
		{Ts: 1700000000000, Kv: []*sluicepb.KeyValue{pkv("pl", 41), pkv("pd", 21.5)}},
		{Ts: 1700000001000, Kv: []*sluicepb.KeyValue{
			pkv("pl", 42), pkv("pb", true), pkv("ps", "42"), pkv("pd", 42.0), pkv("pj", json.RawMessage(`{ "a": [1, 2] }`)),
		}},
	}})
	n.expectPost(devTelemetry, "", tel, 200, "", pb)
	got := string(n.expect("GET", "/api/plugins/telemetry/DEVICE/"+dev+"/values/timeseries?keys=pl,pb,ps,pd,pj&useStrictDataTypes=true", auth, nil, 200, ""))
	want := `{"pl":[{"ts":1700000001000,"value":42}],"pb":[{"ts":1700000001000,"value":true}],` +
		`"ps":[{"ts":1700000001000,"value":"42"}],"pd":[{"ts":1700000001000,"value":42.0}],` +
		`"pj":[{"ts":1700000001000,"value":{"a":[1,2]}}]}`
	if got != want {
		t.Fatalf("latest:\ngot  %s\nwant %s", got, want)
	}
	hist := string(n.expect("GET", "/api/plugins/telemetry/DEVICE/"+dev+"/values/timeseries?keys=pd&startTs=0&endTs=9999999999999&orderBy=ASC&useStrictDataTypes=true", auth, nil, 200, ""))
	if hist != `{"pd":[{"ts":1700000000000,"value":21.5},{"ts":1700000001000,"value":42.0}]}` {
		t.Fatalf("history: %s", hist)
	}

	// Attributes, compressed, over the device and the REST API.
	attrs := marshal(&sluicepb.AttributesRequest{Kv: []*sluicepb.KeyValue{pkv("pfw", "3.1"), pkv("pon", false)}})
	n.expectPost("/api/v1/"+n.Demo.DemoDeviceToken+"/attributes", "", zstded(t, attrs), 200, "", "Content-Type: application/protobuf", "Content-Encoding: zstd")
	srv := marshal(&sluicepb.AttributesRequest{Kv: []*sluicepb.KeyValue{pkv("plimit", 10)}})
	n.expectPost("/api/plugins/telemetry/DEVICE/"+dev+"/SERVER_SCOPE", auth, gzipped(t, srv), 200, "", pb, "Content-Encoding: gzip")
	a := string(n.expect("GET", "/api/plugins/telemetry/DEVICE/"+dev+"/values/attributes?keys=pfw,pon,plimit", auth, nil, 200, ""))
	for _, w := range []string{`"key":"pfw","value":"3.1"`, `"key":"pon","value":false`, `"key":"plimit","value":10`} {
		if !strings.Contains(a, w) {
			t.Fatalf("attributes %s lack %s", a, w)
		}
	}

	// Errors are the JSON ones.
	rest := "/api/plugins/telemetry/DEVICE/" + dev + "/timeseries/ANY"
	n.expectPost(rest, auth, nil, 400, "No time series data found in request body!", pb)
	n.expectPost(rest, auth, marshal(&sluicepb.TelemetryRequest{Packs: []*sluicepb.TsKvList{{Kv: []*sluicepb.KeyValue{pkv("x", nil)}}}}),
		400, `Can't parse value: key "x" has no value`, pb)
	n.expectPost(devTelemetry, "", marshal(&sluicepb.TelemetryRequest{Packs: []*sluicepb.TsKvList{{Kv: []*sluicepb.KeyValue{pkv("j", json.RawMessage(`{`))}}}}),
		400, `value of key "j": json_v: invalid JSON`, pb)
	n.expectPost(devTelemetry, "", []byte{0x0a, 0x05}, 400, "invalid protobuf at offset 1: unexpected EOF", pb)
}

// batchJSON is 100 timestamped packs of four values, as a buffering device
// sends them.
var batchJSON = func() []byte {
	var b strings.Builder
	b.WriteByte('[')
	for i := range 100 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"ts":%d,"values":{"temperature":%d.%d,"humidity":%d,"active":true,"status":"ok"}}`,
			1634712287000+int64(i)*1000, 20+i%10, i%10, 40+i%50)
	}
	b.WriteByte(']')
	return []byte(b.String())
}()

// benchDecode measures the decode stage of a telemetry request: Content-Type
// lookup, decompression and parsing. SetBytes counts the decoded bytes.
func benchDecode(b *testing.B, body []byte, plainLen int, headers ...string) {
	s := New(Config{MaxBodySize: 1 << 20}, nil, nil, nil, nil)
	var ctx fasthttp.RequestCtx
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ": ")
		ctx.Request.Header.Set(name, value)
	}
	ctx.Request.SetBody(body)
	bt := new(batch)
	b.ReportAllocs()
	b.SetBytes(int64(plainLen))
	for b.Loop() {
		if !s.decodeTelemetry(&ctx, bt, false) {
			b.Fatal(string(ctx.Response.Body()))
		}
		if len(bt.entries) != 400 {
			b.Fatalf("%d entries", len(bt.entries))
		}
		bt.reset()
	}
}

func BenchmarkDecodeJSONBatch100(b *testing.B) {
	benchDecode(b, batchJSON, len(batchJSON), "Content-Type: application/json")
}

func BenchmarkDecodeGzipJSONBatch100(b *testing.B) {
	benchDecode(b, gzipped(b, batchJSON), len(batchJSON), "Content-Type: application/json", "Content-Encoding: gzip")
}

func BenchmarkDecodeZstdJSONBatch100(b *testing.B) {
	benchDecode(b, zstded(b, batchJSON), len(batchJSON), "Content-Type: application/json", "Content-Encoding: zstd")
}

func BenchmarkDecodeProtobufBatch100(b *testing.B) {
	var m sluicepb.TelemetryRequest
	for i := range 100 {
		m.Packs = append(m.Packs, &sluicepb.TsKvList{Ts: 1634712287000 + int64(i)*1000, Kv: []*sluicepb.KeyValue{
			pkv("temperature", float64(20+i%10)+float64(i%10)/10), pkv("humidity", 40+i%50), pkv("active", true), pkv("status", "ok"),
		}})
	}
	body, err := proto.Marshal(&m)
	if err != nil {
		b.Fatal(err)
	}
	benchDecode(b, body, len(body), "Content-Type: application/x-protobuf")
}

// TestAPIDocBodies checks that every telemetry and attribute write documents
// the protobuf body, Content-Encoding and 415.
func TestAPIDocBodies(t *testing.T) {
	doc := loadAPIDoc(t)
	for _, id := range []string{"postTelemetry", "postClientAttributes", "saveEntityAttributesV2", "saveEntityAttributesV1",
		"saveDeviceAttributes", "saveEntityTelemetry", "saveEntityTelemetryWithTTL"} {
		var op *openapi3.Operation
		for _, item := range doc.Paths.Map() {
			if o := item.Post; o != nil && o.OperationID == id {
				op = o
			}
		}
		if op == nil {
			t.Fatalf("%s: not documented", id)
		}
		if op.RequestBody.Value.Content.Get("application/x-protobuf") == nil || op.RequestBody.Value.Content.Get("application/json") == nil {
			t.Errorf("%s: protobuf or JSON body not documented", id)
		}
		if op.Parameters.GetByInAndName("header", "Content-Encoding") == nil {
			t.Errorf("%s: Content-Encoding not documented", id)
		}
		if op.Responses.Value("415") == nil || op.Responses.Value("413") == nil {
			t.Errorf("%s: 413 or 415 not documented", id)
		}
	}
}

// TestInflateBudget: decompressed bodies of all requests together stay within the
// node's budget. Past it a request gets a 503 with Retry-After and its JSON error;
// every request, answered or refused, gives back what it took.
func TestInflateBudget(t *testing.T) {
	n := startTestNode(t)
	devTelemetry := "/api/v1/" + n.Demo.DemoDeviceToken + "/telemetry"
	full := inflateBudgetFor(1 << 20)
	if got := n.API.inflate.left.Load(); got != full {
		t.Fatalf("budget %d, want %d", got, full)
	}
	// A batch that decompresses to about 600 KB.
	var b strings.Builder
	b.WriteByte('[')
	for i := range 20000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"ts":%d,"values":{"v":%d}}`, 1700000000000+int64(i), i%10)
	}
	b.WriteByte(']')
	body := gzipped(t, []byte(b.String()))

	// Other requests hold all but 100 KiB.
	held := int(full - 100<<10)
	if !n.API.inflate.take(held) {
		t.Fatal("cannot take the budget")
	}
	req, err := http.NewRequest("POST", n.URL+devTelemetry, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e apiError
	n.decode(out, &e)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || e.Status != 503 || !strings.Contains(e.Message, "retry later") {
		t.Fatalf("over the budget: %d, Retry-After %q, %s", resp.StatusCode, resp.Header.Get("Retry-After"), out)
	}
	n.API.inflate.give(held)

	n.expectPost(devTelemetry, "", body, 200, "", "Content-Encoding: gzip")
	n.expectPost(devTelemetry, "", gzipped(t, make([]byte, 8<<20)), 413, "Payload size exceeds", "Content-Encoding: gzip")
	if got := n.API.inflate.left.Load(); got != full {
		t.Fatalf("budget %d after the requests, want all of it back (%d)", got, full)
	}
}

// FuzzContentEncoding: any Content-Encoding value either names gzip (x-gzip) or
// zstd, in any case and with spaces around, and the body decodes, or is identity,
// or is a 415 naming it; never a panic.
func FuzzContentEncoding(f *testing.F) {
	for _, s := range []string{"gzip", " GZip ", "x-gzip", "zstd", "ZSTD", "identity", "", "br", "deflate",
		"gzip, zstd", "gzip;q=1", "\x00", "gzi"} {
		f.Add(s)
	}
	const body = `{"a":1}`
	gz, zs := gzipped(f, []byte(body)), zstded(f, []byte(body))
	f.Fuzz(func(t *testing.T, enc string) {
		name := strings.TrimSpace(enc)
		is := func(s string) bool { return strings.EqualFold(name, s) }
		if isIdentity([]byte(enc)) != (name == "" || is("identity")) {
			t.Fatalf("%q: identity %v", enc, isIdentity([]byte(enc)))
		}
		if isIdentity([]byte(enc)) {
			return
		}
		packed := gz
		if is("zstd") {
			packed = zs
		}
		got, err := decompress(nil, []byte(enc), packed, 1<<10, nil)
		var bad *unsupportedEncodingError
		switch {
		case is("gzip"), is("x-gzip"), is("zstd"):
			if err != nil || string(got) != body {
				t.Fatalf("%q: %q, %v", enc, got, err)
			}
		default:
			if !errors.As(err, &bad) {
				t.Fatalf("%q: %q, %v; want unsupported", enc, got, err)
			}
		}
	})
}

// TestRESTBodyLimits: the nesting and keys-per-object limits of telemetry apply
// to every REST body too, free-form fields (RPC params, additionalInfo) included,
// and a refusal names the limit.
func TestRESTBodyLimits(t *testing.T) {
	n := startTestNode(t)
	auth := n.tenant()
	dev := n.Demo.DemoDeviceID.String()
	deep := strings.Repeat(`{"a":`, 40) + "1" + strings.Repeat("}", 40)
	n.expectPost("/api/rpc/oneway/"+dev, auth, []byte(`{"method":"m","params":`+deep+`}`), 400, "nesting depth exceeds 32")
	var wide strings.Builder
	wide.WriteString(`{"name":"wide","type":"default","additionalInfo":{`)
	for i := range 1001 {
		if i > 0 {
			wide.WriteByte(',')
		}
		fmt.Fprintf(&wide, `"k%d":%d`, i, i)
	}
	wide.WriteString(`}}`)
	n.expectPost("/api/device", auth, []byte(wide.String()), 400, "object has more than 1000 keys")
	n.expectPost("/api/device", auth, []byte(`{"name":"narrow","type":"default","additionalInfo":{"a":[1,{"b":2}]}}`), 200, "")
	// A UTF-8 byte order mark is skipped, as Jackson does; one in the middle is no JSON.
	n.expectPost("/api/device", auth, []byte("\xef\xbb\xbf"+`{"name":"marked","type":"default"}`), 200, "")
	n.expectPost("/api/device", auth, []byte(`{"name":"x"}`+"\xef\xbb\xbf"), 400, "")
	n.expectPost("/api/v1/"+n.Demo.DemoDeviceToken+"/rpc", "", []byte(`{"method":"m","params":`+deep+`}`), 400, "nesting depth exceeds 32")
}

// TestCompressedJSONBodies: the other JSON bodies (login, REST, device RPC
// replies) take gzip and zstd too, within their own limits, and refuse an
// unknown encoding with 415 as telemetry does.
func TestCompressedJSONBodies(t *testing.T) {
	n := startTestNode(t)
	json := "Content-Type: application/json"
	login := []byte(`{"username":"` + engine.DemoTenantAdminEmail + `","password":"tenant"}`)
	_, out := n.post("/api/auth/login", "", gzipped(t, login), json, "Content-Encoding: gzip")
	var pair struct{ Token string }
	n.decode(out, &pair)
	if pair.Token == "" {
		t.Fatalf("gzip login: %s", out)
	}
	auth := "Bearer " + pair.Token
	n.expectPost("/api/auth/login", "", login, 415, "Content-Encoding 'br' is not supported", json, "Content-Encoding: br")
	n.expectPost("/api/auth/login", "", gzipped(t, make([]byte, 1<<20)), 413, "Payload size exceeds the limit of 65536 bytes", json, "Content-Encoding: gzip")

	n.expectPost("/api/device", auth, zstded(t, []byte(`{"name":"zipped","type":"default"}`)), 200, "", json, "Content-Encoding: zstd")
	n.expectPost("/api/device", auth, []byte(`{"name":"x"}`), 415, "Content-Encoding 'br' is not supported", json, "Content-Encoding: br")
	n.expectPost("/api/device", auth, []byte(`{"name":"x"}`), 400, "Invalid gzip body", json, "Content-Encoding: gzip")

	// The API key description is a raw text body, not JSON.
	var key engine.APIKeyInfo
	n.decode(n.expect("POST", "/api/apiKey", auth, map[string]any{"description": "plain", "enabled": true}, 200, ""), &key)
	descPath := "/api/apiKey/" + key.ID.ID.String() + "/description"
	if code, out := n.send("PUT", descPath, auth, gzipped(t, []byte("zipped bot")), "Content-Encoding: gzip"); code != 200 {
		t.Fatalf("gzip description: %d %s", code, out)
	} else if n.decode(out, &key); key.Description != "zipped bot" {
		t.Fatalf("gzip description: %+v", key)
	}
	if code, out := n.send("PUT", descPath, auth, []byte("x"), "Content-Encoding: br"); code != 415 {
		t.Fatalf("br description: %d %s", code, out)
	}

	token := n.Demo.DemoDeviceToken
	n.expectPost("/api/v1/"+token+"/rpc/1", "", gzipped(t, []byte(`{"ok":true}`)), 200, "", "Content-Encoding: gzip")
	n.expectPost("/api/v1/"+token+"/rpc/1", "", gzipped(t, make([]byte, 1<<20)), 413, "Payload size exceeds the limit of 65536 bytes", "Content-Encoding: gzip")
	n.expectPost("/api/v1/"+token+"/rpc", "", gzipped(t, []byte(`{"method":"m","params":`+strings.Repeat("[", 40)+strings.Repeat("]", 40)+`}`)), 400, "nesting depth exceeds 32", "Content-Encoding: gzip")
	if got := n.API.inflate.left.Load(); got != inflateBudgetFor(1<<20) {
		t.Fatalf("budget %d after the requests, want all of it back", got)
	}
}

// TestRESTBodyCap: a REST JSON body stops at 16 MiB, as ThingsBoard's /api/**,
// below the node's SLUICE_MAX_BODY_SIZE; the device API keeps the node's limit.
func TestRESTBodyCap(t *testing.T) {
	s := New(Config{MaxBodySize: 32 << 20}, nil, nil, slog.New(slog.DiscardHandler), nil)
	body := []byte(`{"method":"m","params":"` + strings.Repeat("x", 17<<20) + `"}`)
	var v map[string]any
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.Header.SetContentType("application/json")
	ctx.Request.SetBody(body)
	if s.readJSON(&ctx, &v) || ctx.Response.StatusCode() != 413 || !strings.Contains(string(ctx.Response.Body()), "16777216") {
		t.Fatalf("REST body of 17 MiB: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	ctx.Response.Reset()
	if !s.readAnyJSON(&ctx, &v) {
		t.Fatalf("device-API body of 17 MiB: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}
