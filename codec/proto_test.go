package codec

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-iot/sluice/codec/proto"
	"github.com/sluice-iot/sluice/kv"
)

// jsonText marks a json_v value for pkv.
type jsonText string

// pkv builds a KeyValue; v is bool, int64, float64, string, jsonText or nil.
func pkv(key string, v any) *sluicepb.KeyValue {
	m := &sluicepb.KeyValue{Key: key}
	switch v := v.(type) {
	case bool:
		m.Value = &sluicepb.KeyValue_BoolV{BoolV: v}
	case int64:
		m.Value = &sluicepb.KeyValue_LongV{LongV: v}
	case int:
		m.Value = &sluicepb.KeyValue_LongV{LongV: int64(v)}
	case float64:
		m.Value = &sluicepb.KeyValue_DoubleV{DoubleV: v}
	case string:
		m.Value = &sluicepb.KeyValue_StringV{StringV: v}
	case jsonText:
		m.Value = &sluicepb.KeyValue_JsonV{JsonV: string(v)}
	}
	return m
}

func pack(ts int64, kvs ...*sluicepb.KeyValue) *sluicepb.TsKvList {
	return &sluicepb.TsKvList{Ts: ts, Kv: kvs}
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseProtoTelemetry(t *testing.T) {
	l, s := kv.LongValue, kv.StringValue
	f := func(packs []*sluicepb.TsKvList, want ...kv.Entry) {
		t.Helper()
		body := marshal(t, &sluicepb.TelemetryRequest{Packs: packs})
		got, err := ParseProtoTelemetry(nil, body, now, Limits{}, true)
		if err != nil {
			t.Fatalf("%v: %v", packs, err)
		}
		checkEntries(t, string(body), got, want)
	}
	f(nil)
	f([]*sluicepb.TsKvList{pack(0, pkv("a", 1), pkv("b", 2.5), pkv("c", true), pkv("d", "x"))},
		e(now, "a", l(1)), e(now, "b", kv.DoubleValue(2.5)), e(now, "c", kv.BoolValue(true)), e(now, "d", s("x")))
	// No type-casting: a string stays a string, 42.0 a double, false a bool.
	f([]*sluicepb.TsKvList{pack(5, pkv("n", "42"), pkv("f", 42.0), pkv("b", false), pkv("e", ""))},
		e(5, "n", s("42")), e(5, "f", kv.DoubleValue(42)), e(5, "b", kv.BoolValue(false)), e(5, "e", s("")))
	f([]*sluicepb.TsKvList{pack(1, pkv("a", math.MaxInt64)), pack(-2, pkv("a", math.MinInt64)), pack(0, pkv("a", 0))},
		e(1, "a", l(math.MaxInt64)), e(-2, "a", l(math.MinInt64)), e(now, "a", l(0)))
	// json_v is stored compact, whatever JSON value it holds.
	f([]*sluicepb.TsKvList{pack(7, pkv("o", jsonText(` { "a" : [1, 2] } `)), pkv("s", jsonText(`"x"`)), pkv("n", jsonText(`null`)))},
		e(7, "o", kv.JSONValue(`{"a":[1,2]}`)), e(7, "s", kv.JSONValue(`"x"`)), e(7, "n", kv.JSONValue(`null`)))
	// Duplicates: one entry per occurrence, in order.
	f([]*sluicepb.TsKvList{pack(3, pkv("a", 1), pkv("a", 2))}, e(3, "a", l(1)), e(3, "a", l(2)))
}

func TestParseProtoAttributes(t *testing.T) {
	s := kv.StringValue
	body := marshal(t, &sluicepb.AttributesRequest{Kv: []*sluicepb.KeyValue{pkv("fw", "1.0"), pkv("cfg", jsonText(`{"i":60}`)), pkv("on", true)}})
	got, err := ParseProtoAttributes(nil, body, Limits{}, false)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, "attributes", got, []kv.Entry{e(0, "fw", s("1.0")), e(0, "cfg", kv.JSONValue(`{"i":60}`)), e(0, "on", kv.BoolValue(true))})
}

// TestProtoWireOrder covers what generated code never sends but other
// encoders may: ts after the values, fields of a KeyValue in any order, a
// oneof member repeated (the last wins) and unknown fields (skipped).
func TestProtoWireOrder(t *testing.T) {
	s := kv.StringValue
	var kvb []byte
	kvb = protowire.AppendTag(kvb, 3, protowire.VarintType)
	kvb = protowire.AppendVarint(kvb, 9)
	kvb = protowire.AppendTag(kvb, 99, protowire.BytesType)
	kvb = protowire.AppendString(kvb, "unknown")
	kvb = protowire.AppendTag(kvb, 1, protowire.BytesType)
	kvb = protowire.AppendString(kvb, "k")
	kvb = protowire.AppendTag(kvb, 5, protowire.BytesType)
	kvb = protowire.AppendString(kvb, "last")
	var pk []byte
	pk = protowire.AppendTag(pk, 2, protowire.BytesType)
	pk = protowire.AppendBytes(pk, kvb)
	pk = protowire.AppendTag(pk, 1, protowire.VarintType)
	pk = protowire.AppendVarint(pk, 77)
	var body []byte
	body = protowire.AppendTag(body, 1, protowire.BytesType)
	body = protowire.AppendBytes(body, pk)
	body = protowire.AppendTag(body, 2, protowire.Fixed32Type)
	body = protowire.AppendFixed32(body, 1)
	got, err := ParseProtoTelemetry(nil, body, now, Limits{}, true)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, "wire order", got, []kv.Entry{e(77, "k", s("last"))})
	// The generated code reads the same.
	var m sluicepb.TelemetryRequest
	if err := proto.Unmarshal(body, &m); err != nil || m.Packs[0].Ts != 77 || m.Packs[0].Kv[0].GetStringV() != "last" {
		t.Fatalf("generated code reads %v (%v)", &m, err)
	}
}

func TestProtoNoValue(t *testing.T) {
	l := kv.LongValue
	body := marshal(t, &sluicepb.TelemetryRequest{Packs: []*sluicepb.TsKvList{pack(1, pkv("a", nil), pkv("b", 1))}})
	got, err := ParseProtoTelemetry(nil, body, now, Limits{}, false)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, "lenient", got, []kv.Entry{e(1, "b", l(1))})
	if _, err := ParseProtoTelemetry(nil, body, now, Limits{}, true); err == nil || err.Error() != `Can't parse value: key "a" has no value` {
		t.Fatalf("strict: %v", err)
	}
}

// rawOne encodes a TelemetryRequest of one pack with one KeyValue whose
// string field num holds val, bypassing proto.Marshal's UTF-8 check.
func rawOne(key string, num protowire.Number, val string) []byte {
	var kvb, pk, body []byte
	kvb = protowire.AppendTag(kvb, 1, protowire.BytesType)
	kvb = protowire.AppendString(kvb, key)
	kvb = protowire.AppendTag(kvb, num, protowire.BytesType)
	kvb = protowire.AppendString(kvb, val)
	pk = protowire.AppendTag(pk, 2, protowire.BytesType)
	pk = protowire.AppendBytes(pk, kvb)
	body = protowire.AppendTag(body, 1, protowire.BytesType)
	return protowire.AppendBytes(body, pk)
}

func TestProtoErrors(t *testing.T) {
	lim := Limits{MaxEntries: 2, MaxKeyLen: 4, MaxValueLen: 8, MaxDepth: 2}
	f := func(body []byte, want string) {
		t.Helper()
		dst := []kv.Entry{e(1, "keep", kv.LongValue(1))}
		got, err := ParseProtoTelemetry(dst, body, now, lim, false)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want %q", err, want)
		}
		if _, ok := err.(*Error); !ok {
			t.Fatalf("error %T, want *Error", err)
		}
		if len(got) != 1 || got[0].Key != "keep" {
			t.Fatalf("dst changed on error: %+v", got)
		}
	}
	one := func(kvs ...*sluicepb.KeyValue) []byte {
		return marshal(t, &sluicepb.TelemetryRequest{Packs: []*sluicepb.TsKvList{pack(1, kvs...)}})
	}
	f([]byte{0x0a}, "invalid protobuf at offset 1: unexpected EOF")
	f([]byte{0x0a, 0x05, 0x10}, "invalid protobuf at offset 1: unexpected EOF")
	f([]byte{0x00}, "invalid protobuf at offset 0: invalid field number")
	f([]byte{0x85, 0x85, 0x85, 0x85, 0x30}, "invalid protobuf at offset 0: invalid field number")
	f([]byte{0x08, 0x01}, "field 1 has wire type 0, want 2")
	f(one(pkv(" ", 1)), "Key cannot be blank")
	f(one(pkv("", 1)), "Key cannot be blank")
	f(one(pkv("toolong", 1)), "key length exceeds 4 bytes")
	f(rawOne("\xff", 5, "x"), "key is not valid UTF-8")
	f(rawOne("a", 5, "\xff"), `value of key "a": string_v is not valid UTF-8`)
	f(rawOne("a", 6, "\"\xff\""), `value of key "a": json_v: invalid JSON at offset 1: invalid UTF-8`)
	f(one(pkv("a", "123456789")), `value of key "a": value length exceeds 8 bytes`)
	f(one(pkv("a", jsonText(`[1, 2, 3, 4, 5]`))), `value of key "a": value length exceeds 8 bytes`)
	f(one(pkv("a", jsonText(`{"a":`))), `value of key "a": json_v: invalid JSON: unexpected end of input`)
	f(one(pkv("a", jsonText(`1 2`))), `json_v: invalid JSON at offset 2: unexpected data after the JSON value`)
	f(one(pkv("a", jsonText(``))), `json_v: invalid JSON`)
	f(one(pkv("a", jsonText(`[[[1]]]`))), `json_v: nesting depth exceeds 2`)
	f(one(pkv("a", math.NaN())), "Can't parse value: NaN")
	f(one(pkv("a", math.Inf(-1))), "Can't parse value: -Inf")
	f(one(pkv("a", 1), pkv("b", 2), pkv("c", 3)), "entries exceed 2")
}

func TestDecoderFor(t *testing.T) {
	f := func(ct string, want Decoder) {
		t.Helper()
		got, err := DecoderFor([]byte(ct))
		if err != nil || got != want {
			t.Fatalf("%q: %v, %v", ct, got, err)
		}
	}
	f("", JSON)
	f("application/json", JSON)
	f("Application/JSON; charset=UTF-8", JSON)
	f("text/plain;charset=utf-8", JSON)
	f("application/x-www-form-urlencoded", JSON)
	f(" application/json ", JSON)
	f("application/x-protobuf", Protobuf)
	f("application/protobuf; proto=sluice.v1.TelemetryRequest", Protobuf)
	fail := func(ct, mt string) {
		t.Helper()
		_, err := DecoderFor([]byte(ct))
		ue, ok := err.(*UnsupportedTypeError)
		if !ok || ue.MediaType != mt || !strings.Contains(err.Error(), "application/json") || !strings.Contains(err.Error(), "application/x-protobuf") {
			t.Fatalf("%q: %v", ct, err)
		}
	}
	fail("application/xml", "application/xml")
	fail("multipart/form-data; boundary=x", "multipart/form-data")
	if allocs := testing.AllocsPerRun(100, func() { DecoderFor([]byte("Application/X-Protobuf")) }); allocs != 0 {
		t.Fatalf("%v allocs", allocs)
	}
}

func TestJSONEngine(t *testing.T) {
	got := JSONEngine()
	if !strings.HasPrefix(got, "sonic native (") && !strings.HasPrefix(got, "encoding/json fallback (") {
		t.Fatalf("JSONEngine() = %q", got)
	}
	t.Log(got)
}

var protoBatch = func() []byte {
	var m sluicepb.TelemetryRequest
	for i := range 100 {
		m.Packs = append(m.Packs, pack(1634712287000+int64(i)*1000,
			pkv("temperature", float64(20+i%10)+float64(i%10)/10), pkv("humidity", 40+i%50),
			pkv("active", true), pkv("status", "ok")))
	}
	b, err := proto.Marshal(&m)
	if err != nil {
		panic(err)
	}
	return b
}()

func TestProtoZeroAllocs(t *testing.T) {
	dst := make([]kv.Entry, 0, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if dst, err = ParseProtoTelemetry(dst[:0], protoBatch, now, Limits{}, false); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 || len(dst) != 400 {
		t.Fatalf("%v allocs, %d entries", allocs, len(dst))
	}
}

func BenchmarkParseProtoBatch100(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(protoBatch)))
	dst := make([]kv.Entry, 0, 1024)
	var err error
	for b.Loop() {
		if dst, err = ParseProtoTelemetry(dst[:0], protoBatch, now, Limits{}, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGeneratedProtoBatch100 is proto.Unmarshal into the generated
// types, for comparison: what the hand-written reader saves.
func BenchmarkGeneratedProtoBatch100(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(protoBatch)))
	for b.Loop() {
		var m sluicepb.TelemetryRequest
		if err := proto.Unmarshal(protoBatch, &m); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzParseProtoTelemetry(f *testing.F) {
	addProtoSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > maxFuzzBody && fuzzing() {
			return
		}
		for _, lim := range []Limits{{}, fuzzLimits} {
			got, err := ParseProtoTelemetry(nil, body, now, lim, false)
			var m sluicepb.TelemetryRequest
			checkProto(t, body, &m, got, err, lim, func() []kv.Entry {
				var want []kv.Entry
				for _, p := range m.Packs {
					ts := p.Ts
					if ts == 0 {
						ts = now
					}
					want = appendModel(want, p.Kv, ts)
				}
				return want
			})
			strict, serr := ParseProtoTelemetry(nil, body, now, lim, true)
			checkProtoStrict(t, body, got, err, strict, serr)
		}
	})
}

func FuzzParseProtoAttributes(f *testing.F) {
	addProtoSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > maxFuzzBody && fuzzing() {
			return
		}
		for _, lim := range []Limits{{}, fuzzLimits} {
			got, err := ParseProtoAttributes(nil, body, lim, false)
			var m sluicepb.AttributesRequest
			checkProto(t, body, &m, got, err, lim, func() []kv.Entry { return appendModel(nil, m.Kv, 0) })
			strict, serr := ParseProtoAttributes(nil, body, lim, true)
			checkProtoStrict(t, body, got, err, strict, serr)
		}
	})
}

func addProtoSeeds(f *testing.F) {
	add := func(m proto.Message) { f.Add(marshal(f, m)) }
	add(&sluicepb.TelemetryRequest{Packs: []*sluicepb.TsKvList{
		pack(5, pkv("a", 1), pkv("b", 2.5), pkv("c", true), pkv("d", "x"), pkv("e", jsonText(`{"x": [1]}`))),
		pack(0, pkv("n", nil), pkv(" ", 1)),
	}})
	add(&sluicepb.AttributesRequest{Kv: []*sluicepb.KeyValue{pkv("fw", "1.0"), pkv("j", jsonText(`[[[[[[[1]]]]]]]`)), pkv("nan", math.NaN())}})
	f.Add(protoBatch[:200])
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x05, 0x10})
	f.Add([]byte{0x08, 0x01, 0x0b, 0x0c})
	f.Add([]byte{0x0a, 0x08, 0x12, 0x06, 0x0a, 0x01, 'k', 0x2a, 0x01, 0xff}) // string_v "\xff"
}

// appendModel applies the documented rules to messages the generated code
// decoded: the oracle of the fuzz targets for bodies the parser accepts.
func appendModel(dst []kv.Entry, kvs []*sluicepb.KeyValue, ts int64) []kv.Entry {
	for _, m := range kvs {
		var v kv.Value
		switch x := m.Value.(type) {
		case nil:
			continue
		case *sluicepb.KeyValue_BoolV:
			v = kv.BoolValue(x.BoolV)
		case *sluicepb.KeyValue_LongV:
			v = kv.LongValue(x.LongV)
		case *sluicepb.KeyValue_DoubleV:
			v = kv.DoubleValue(x.DoubleV)
		case *sluicepb.KeyValue_StringV:
			v = kv.StringValue(x.StringV)
		case *sluicepb.KeyValue_JsonV:
			var buf bytes.Buffer
			if json.Compact(&buf, []byte(x.JsonV)) != nil {
				buf.WriteString("<invalid>")
			}
			v = kv.JSONValue(buf.String())
		}
		dst = append(dst, kv.Entry{Ts: ts, Key: m.Key, Value: v})
	}
	return dst
}

// checkProto checks a parse result against the generated code: a body the
// generated code rejects must be rejected, and an accepted one must give the
// model's entries within the limits.
func checkProto(t *testing.T, body []byte, m proto.Message, got []kv.Entry, err error, lim Limits, model func() []kv.Entry) {
	t.Helper()
	lim = lim.withDefaults()
	uerr := proto.Unmarshal(body, m)
	if err != nil {
		if _, ok := err.(*Error); !ok {
			t.Fatalf("%q: error %T %v, want *Error", body, err, err)
		}
		if got != nil {
			t.Fatalf("%q: entries returned with error", body)
		}
		return
	}
	if uerr != nil {
		t.Fatalf("%q: accepted, but proto.Unmarshal says %v", body, uerr)
	}
	checkEntries(t, string(body), got, model())
	if len(got) > lim.MaxEntries {
		t.Fatalf("%q: %d entries over MaxEntries", body, len(got))
	}
	for _, en := range got {
		if blank(en.Key) || len(en.Key) > lim.MaxKeyLen {
			t.Fatalf("%q: bad key %q", body, en.Key)
		}
		v := en.Value
		if (v.Type == kv.String || v.Type == kv.JSON) && len(v.Str) > lim.MaxValueLen ||
			v.Type == kv.Double && (math.IsNaN(v.Double) || math.IsInf(v.Double, 0)) {
			t.Fatalf("%q: bad value %+v", body, v)
		}
	}
}

// checkProtoStrict asserts that strict parsing differs only by refusing a
// KeyValue without a value.
func checkProtoStrict(t *testing.T, body []byte, got []kv.Entry, err error, strict []kv.Entry, serr error) {
	t.Helper()
	if serr != nil {
		if err == nil && !strings.HasSuffix(serr.Error(), "has no value") {
			t.Fatalf("%q: strict failed with %v where lenient succeeded", body, serr)
		}
		return
	}
	if err != nil {
		t.Fatalf("%q: strict succeeded where lenient failed with %v", body, err)
	}
	checkEntries(t, string(body), strict, got)
}
