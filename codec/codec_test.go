package codec

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/sluice-iot/sluice/kv"
)

const now = 1000

func e(ts int64, key string, v kv.Value) kv.Entry { return kv.Entry{Ts: ts, Key: key, Value: v} }

func checkEntries(t *testing.T, body string, got, want []kv.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s:\ngot  %+v\nwant %+v", body, got, want)
	}
	for i := range got {
		if got[i].Ts != want[i].Ts || got[i].Key != want[i].Key || !got[i].Value.Same(want[i].Value) {
			t.Fatalf("%s: entry %d:\ngot  %+v\nwant %+v", body, i, got[i], want[i])
		}
	}
}

// telemetryTable lists telemetry bodies in every accepted form with the
// entries they yield at now.
func telemetryTable(f func(body string, want ...kv.Entry)) {
	l, s, j := kv.LongValue, kv.StringValue, kv.JSONValue

	// Form 1: plain key/values at now.
	f(`{}`)
	f(` { } `)
	f(`{"a":1,"b":"x"}`, e(now, "a", l(1)), e(now, "b", s("x")))
	f("\n{ \"a\" :\t1 ,\r\n\"b\": true }\n", e(now, "a", l(1)), e(now, "b", kv.BoolValue(true)))
	f(`{"a":null,"b":1}`, e(now, "b", l(1)))
	f(`{"a":1,"a":2}`, e(now, "a", l(1)), e(now, "a", l(2)))
	f(`{"a\nb":1,"\u00e9":2}`, e(now, "a\nb", l(1)), e(now, "é", l(2)))

	// "ts" or "values" alone are plain keys.
	f(`{"ts":5}`, e(now, "ts", l(5)))
	f(`{"ts":"abc"}`, e(now, "ts", s("abc")))
	f(`{"values":{"a":1}}`, e(now, "values", j(`{"a":1}`)))
	f(`{"values":5}`, e(now, "values", l(5)))
	f(`{"a":1,"ts":5}`, e(now, "a", l(1)), e(now, "ts", l(5)))
	f(`{"ts":5,"a":1}`, e(now, "ts", l(5)), e(now, "a", l(1)))
	f(`{"values":{"":1},"a":1}`, e(now, "values", j(`{"":1}`)), e(now, "a", l(1)))
	f(`{"ts":null}`)

	// Form 2: {"ts","values"}, in either order; other keys are ignored.
	f(`{"ts":5,"values":{"a":1}}`, e(5, "a", l(1)))
	f(`{"values":{"a":1},"ts":5}`, e(5, "a", l(1)))
	f(`{"ts":5,"values":{}}`)
	f(`{"ts":-1,"values":{"a":1}}`, e(-1, "a", l(1)))
	f(`{"a":1,"ts":5,"values":{"b":2}}`, e(5, "b", l(2)))
	f(`{"ts":5,"values":{"b":2},"a":1}`, e(5, "b", l(2)))
	f(`{"ts":5,"x":{"":null},"values":{"b":2},"":null}`, e(5, "b", l(2)))
	f(`{"":1,"ts":5,"values":{"b":2}}`, e(5, "b", l(2)))
	f(`{"t\u0073":5,"values":{"a":1}}`, e(5, "a", l(1)))
	f(`{"ts":5,"values":{"a":null,"b":2}}`, e(5, "b", l(2)))
	f(`{"ts":5,"values":{"ts":1,"values":2}}`, e(5, "ts", l(1)), e(5, "values", l(2)))

	// Duplicate "ts" or "values": the last wins.
	f(`{"ts":1,"ts":2,"values":{"b":2}}`, e(2, "b", l(2)))
	f(`{"ts":1,"values":{"b":2},"ts":3}`, e(3, "b", l(2)))
	f(`{"ts":1,"values":{"a":1},"values":{"b":2}}`, e(1, "b", l(2)))
	f(`{"values":{"a":1},"ts":1,"values":{"b":2}}`, e(1, "b", l(2)))
	f(`{"ts":"x","values":{"a":1},"ts":7}`, e(7, "a", l(1)))

	// "ts" may be an integral number or a string holding one.
	f(`{"ts":"7","values":{"a":1}}`, e(7, "a", l(1)))
	f(`{"ts":"-7","values":{"a":1}}`, e(-7, "a", l(1)))
	f(`{"ts":7.0,"values":{"a":1}}`, e(7, "a", l(1)))
	f(`{"ts":7e3,"values":{"a":1}}`, e(7000, "a", l(1)))
	f(`{"ts":9223372036854775807,"values":{"a":1}}`, e(9223372036854775807, "a", l(1)))

	// Form 3: an array of either form, mixed.
	f(`[]`)
	f(` [ ] `)
	f(`[{}]`)
	f(`[{},{}]`)
	f(`[{"ts":1,"values":{"a":1}},{"b":2},{"ts":3,"values":{"c":"x"}}]`,
		e(1, "a", l(1)), e(now, "b", l(2)), e(3, "c", s("x")))
	f("[ {\"ts\" : 1, \"values\" : {\"a\" : [1, 2]}} ,\n{\"b\":2} ]",
		e(1, "a", j(`[1,2]`)), e(now, "b", l(2)))
}

func TestParseTelemetry(t *testing.T) {
	telemetryTable(func(body string, want ...kv.Entry) {
		t.Helper()
		got, err := ParseTelemetry(nil, []byte(body), now, Limits{})
		if err != nil {
			t.Fatalf("%s: unexpected error: %s", body, err)
		}
		checkEntries(t, body, got, want)
		// Strict only differs on null.
		if !strings.Contains(body, "null") {
			got, err := ParseTelemetryStrict(nil, []byte(body), now, Limits{})
			if err != nil {
				t.Fatalf("%s: strict: unexpected error: %s", body, err)
			}
			checkEntries(t, body, got, want)
		}
	})
}

func TestParseAttributes(t *testing.T) {
	f := func(body string, want ...kv.Entry) {
		t.Helper()
		got, err := ParseAttributes(nil, []byte(body), Limits{})
		if err != nil {
			t.Fatalf("%s: unexpected error: %s", body, err)
		}
		checkEntries(t, body, got, want)
	}
	l := kv.LongValue
	f(`{}`)
	f(`{"a":1,"b":"on"}`, e(0, "a", l(1)), e(0, "b", kv.StringValue("on")))
	f(`{"a":null}`)
	f(`{"ts":1,"values":{"a":1}}`, e(0, "ts", l(1)), e(0, "values", kv.JSONValue(`{"a":1}`)))
	f(` {"a" : [ 1 ] } `, e(0, "a", kv.JSONValue(`[1]`)))
}

func TestAttributesShape(t *testing.T) {
	f := func(body, want string) {
		t.Helper()
		_, err := ParseAttributes(nil, []byte(body), Limits{})
		if err == nil || err.Error() != want {
			t.Fatalf("%s: got error %v, want %q", body, err, want)
		}
	}
	f(`[]`, "attributes must be a JSON object, got array")
	f(`[{"a":1}]`, "attributes must be a JSON object, got array")
	f(`1`, "attributes must be a JSON object, got number")
	f(`"a"`, "attributes must be a JSON object, got string")
	f(`null`, "attributes must be a JSON object, got null")
	f(`x`, "invalid JSON at offset 0: unexpected character 'x'")
	f(`nope{`, "invalid JSON at offset 0: unexpected character 'n'") // not "got null"
	f(`tru`, "invalid JSON at offset 0: unexpected character 't'")
}

func TestStrictNull(t *testing.T) {
	f := func(body string, telemetry bool) {
		t.Helper()
		var err error
		if telemetry {
			_, err = ParseTelemetryStrict(nil, []byte(body), now, Limits{})
		} else {
			_, err = ParseAttributesStrict(nil, []byte(body), Limits{})
		}
		if err == nil || err.Error() != "Can't parse value: null" {
			t.Fatalf("%s: got error %v, want Can't parse value: null", body, err)
		}
	}
	f(`{"a":null}`, false)
	f(`{"a":1,"b":null}`, false)
	f(`{"a":null}`, true)
	f(`{"ts":1,"values":{"a":null}}`, true)
	f(`[{"a":1},{"b":null}]`, true)

	// A null inside a JSON value or on an ignored key is fine.
	for _, body := range []string{`{"a":[null]}`, `{"ts":1,"values":{},"x":null}`, `{"x":null,"ts":1,"values":{}}`} {
		if _, err := ParseTelemetryStrict(nil, []byte(body), now, Limits{}); err != nil {
			t.Fatalf("%s: unexpected error: %s", body, err)
		}
	}
}

// errorTable lists bad bodies with the message (or its start) they get.
// attr marks those that fail the same way as attributes.
func errorTable(f func(body, want string, attr bool)) {
	// Shape.
	f(``, "empty body", true)
	f(" \n\t", "empty body", true)
	f(`42`, "telemetry must be a JSON object or an array of objects, got number", false)
	f(`"x"`, "telemetry must be a JSON object or an array of objects, got string", false)
	f(`true`, "telemetry must be a JSON object or an array of objects, got boolean", false)
	f(`null`, "telemetry must be a JSON object or an array of objects, got null", false)
	f(`[1]`, "telemetry array element 0 must be a JSON object, got number", false)
	f(`[{},[]]`, "telemetry array element 1 must be a JSON object, got array", false)
	f(`[{},null]`, "telemetry array element 1 must be a JSON object, got null", false)
	f(`{"ts":1,"values":5}`, `"values" must be a JSON object, got number`, false)
	f(`{"ts":1,"values":null}`, `"values" must be a JSON object, got null`, false)
	f(`{"ts":1,"values":[]}`, `"values" must be a JSON object, got array`, false)
	f(`{"values":"x","ts":1}`, `"values" must be a JSON object, got string`, false)
	f(`{"ts":"abc","values":{}}`, `"ts" must be an integer number of milliseconds`, false)
	f(`{"ts":"1.5","values":{}}`, `"ts" must be an integer`, false)
	f(`{"ts":1.5,"values":{}}`, `"ts" must be an integer`, false)
	f(`{"ts":null,"values":{}}`, `"ts" must be an integer`, false)
	f(`{"ts":true,"values":{}}`, `"ts" must be an integer`, false)
	f(`{"ts":{},"values":{}}`, `"ts" must be an integer`, false)
	f(`{"ts":9223372036854775808,"values":{}}`, `"ts" must be an integer`, false)
	f(`{"ts":1e2147483648,"values":{}}`, `"ts" must be an integer`, false)
	f(`{"values":{},"ts":1,"ts":"x"}`, `"ts" must be an integer`, false)

	// Keys.
	f(`{"":1}`, "Key cannot be blank", true)
	f(`{" ":1}`, "Key cannot be blank", true)
	f(`{"\t\n":1}`, "Key cannot be blank", true)
	f(`{"\u3000":1}`, "Key cannot be blank", true)
	f(`{"a":1,"":null}`, "Key cannot be blank", true)
	f(`{"ts":1,"values":{"":1}}`, "Key cannot be blank", false)
	f(`[{"a":1},{"":1}]`, "Key cannot be blank", false)

	// Numbers BigDecimal rejects.
	f(`{"a":1e2147483648}`, "Can't parse value: 1e2147483648 (number out of range)", true)
	f(`{"a":1e-2147483648}`, "Can't parse value: 1e-2147483648 (number out of range)", true)
	f(`{"a":1.5e-2147483647}`, "Can't parse value: 1.5e-2147483647 (number out of range)", true)

	// Syntax.
	for _, body := range []string{
		`{`, `{"a"`, `{"a":`, `{"a":}`, `{"a":1,}`, `{"a":1`, `{,}`, `{"a" 1}`,
		`{"a":1}x`, `{"a":1}{}`, `{} {}`, `{'a':1}`, `{a:1}`, `{"a":01}`, `{"a":1.}`,
		`{"a":.5}`, `{"a":+1}`, `{"a":-}`, `{"a":1e}`, `{"a":1e+}`, `{"a":NaN}`,
		`{"a":Infinity}`, `{"a":tru}`, `{"a":nul}`, `{"a":falsey}`, `{"a":"x`, `{"a":"x\`,
		`{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12G4"}`, "{\"a\":\"\x01\"}",
		"{\"a\":\"\xff\"}", "{\"\xc3\x28\":1}", "{\"a\":[\"\xed\xa0\x80\"]}",
		`{"a":[1,]}`, `{"a":[1 2]}`, `{"a":{"b"}}`, `{"a":{"b":1,}}`, `{"a":{1:2}}`,
		`{"a":1 "b":2}`, `{"a":1,,"b":2}`, "\xef\xbb\xbf{}", `{"a":1}]`, `{/*c*/}`,
		`{"ts":1,"values":{"a":1},"x":[}`, `{"values":{"a":},"ts":1}`,
	} {
		f(body, "invalid JSON", true)
	}
	for _, body := range []string{`[`, `[{"a":1}`, `[{"a":1},]`, `[{}x]`, `[{} {}]`, `[x]`, `[{"a":1}}`} {
		f(body, "invalid JSON", false)
	}
	f("{\"a\":\"\xff\"}", "invalid JSON at offset 6: invalid UTF-8", true)
	f(`{"a":1}x`, "invalid JSON at offset 7: unexpected data after the JSON value", true)
	f(`{"a":tru}`, "invalid JSON at offset 8: unexpected character '}'", true)
	f(`{"a"`, "invalid JSON: unexpected end of input", true)

	// Bodies the fuzz engine stalled on while minimizing them (see maxFuzzBody
	// and testdata/fuzz): long runs of one byte.
	f(`{"`+strings.Repeat("k", 982)+`":{"":0}k`, "key length exceeds 255 bytes", true)
	f(`{"`+strings.Repeat(`\\`, 565)+`\tues":1,"va":[]}`, "key length exceeds 255 bytes", true)
	f(strings.Repeat("\n", 994)+"{\"a\xff", "invalid JSON at offset 997: invalid UTF-8", true)
}

func TestErrors(t *testing.T) {
	errorTable(func(body, want string, attr bool) {
		t.Helper()
		dst := []kv.Entry{e(1, "keep", kv.LongValue(1))}
		check := func(name string, got []kv.Entry, err error) {
			t.Helper()
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("%s %q: got error %v (%T), want *Error %q", name, body, err, err, want)
			}
			if !strings.HasPrefix(pe.Msg, want) {
				t.Fatalf("%s %q: got %q, want %q", name, body, pe.Msg, want)
			}
			if len(got) != 1 || got[0].Key != "keep" {
				t.Fatalf("%s %q: dst changed on error: %+v", name, body, got)
			}
		}
		got, err := ParseTelemetry(dst, []byte(body), now, Limits{})
		check("telemetry", got, err)
		if attr {
			got, err := ParseAttributes(dst, []byte(body), Limits{})
			check("attributes", got, err)
		}
	})
}

func nest(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

func keys(n int, value string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":%s`, i, value)
	}
	b.WriteByte('}')
	return b.String()
}

func TestLimits(t *testing.T) {
	// f parses body as telemetry under lim; want "" means success.
	f := func(lim Limits, body, want string) {
		t.Helper()
		dst := make([]kv.Entry, 5) // MaxEntries counts only new entries
		_, err := ParseTelemetry(dst, []byte(body), now, lim)
		switch {
		case want == "" && err != nil:
			t.Fatalf("%.60s: unexpected error: %s", body, err)
		case want != "" && (err == nil || err.Error() != want):
			t.Fatalf("%.60s: got error %v, want %q", body, err, want)
		}
	}
	def := Limits{}

	// MaxDepth: the top-level container is depth 1.
	f(def, `{"a":`+nest(31)+`}`, "")
	f(def, `{"a":`+nest(32)+`}`, "nesting depth exceeds 32")
	f(def, `[{"a":`+nest(30)+`}]`, "")
	f(def, `[{"a":`+nest(31)+`}]`, "nesting depth exceeds 32")
	f(def, `[{"ts":1,"values":{"a":`+nest(29)+`}}]`, "")
	f(def, `[{"ts":1,"values":{"a":`+nest(30)+`}}]`, "nesting depth exceeds 32")
	f(def, `{"x":`+nest(32)+`,"ts":1,"values":{}}`, "nesting depth exceeds 32")
	f(def, `{"ts":1,"values":{},"x":`+nest(32)+`}`, "nesting depth exceeds 32")
	f(Limits{MaxDepth: 1}, `{"a":1}`, "")
	f(Limits{MaxDepth: 1}, `{"a":{}}`, "nesting depth exceeds 1")
	f(Limits{MaxDepth: 1}, `[{}]`, "nesting depth exceeds 1")
	f(Limits{MaxDepth: 1}, `{"ts":1,"values":{}}`, "nesting depth exceeds 1")
	f(Limits{MaxDepth: 2}, `{"ts":1,"values":{"a":1}}`, "")
	f(Limits{MaxDepth: 2}, `{"values":{"a":1},"ts":1}`, "")
	f(Limits{MaxDepth: 2}, `{"ts":1,"values":{"a":[]}}`, "nesting depth exceeds 2")

	// MaxObjectKeys, in entries' objects and inside JSON values.
	f(def, keys(1000, "1"), "")
	f(def, keys(1001, "1"), "object has more than 1000 keys")
	f(Limits{MaxObjectKeys: 3}, keys(3, "1"), "")
	f(Limits{MaxObjectKeys: 3}, keys(4, "1"), "object has more than 3 keys")
	f(Limits{MaxObjectKeys: 3}, keys(4, "null"), "object has more than 3 keys")
	f(Limits{MaxObjectKeys: 3}, `{"a":`+keys(4, "1")+`}`, "object has more than 3 keys")
	f(Limits{MaxObjectKeys: 3}, `{"ts":1,"values":`+keys(4, "1")+`}`, "object has more than 3 keys")
	f(Limits{MaxObjectKeys: 3}, `{"ts":1,"values":{},"x":1,"y":2}`, "object has more than 3 keys")
	f(Limits{MaxObjectKeys: 3}, `{"a":[1,2,3,4,5]}`, "") // arrays are not bounded by it

	// MaxEntries, across the whole request; dropped nulls do not count.
	f(Limits{MaxEntries: 2}, `{"a":1,"b":2}`, "")
	f(Limits{MaxEntries: 2}, `{"a":1,"b":2,"c":3}`, "entries exceed 2")
	f(Limits{MaxEntries: 2}, `{"a":1,"b":null,"c":3}`, "")
	f(Limits{MaxEntries: 2}, `[{"a":1},{"b":2},{"c":3}]`, "entries exceed 2")
	f(Limits{MaxEntries: 2}, `[{"ts":1,"values":{"a":1,"b":2}},{"ts":2,"values":{"c":3}}]`, "entries exceed 2")
	f(Limits{MaxEntries: 2}, `{"ts":1,"values":{"a":1,"b":2},"values":{"c":3}}`, "")

	// MaxKeyLen counts decoded bytes.
	f(def, `{"`+strings.Repeat("k", 255)+`":1}`, "")
	f(def, `{"`+strings.Repeat("k", 256)+`":1}`, "key length exceeds 255 bytes")
	f(Limits{MaxKeyLen: 3}, `{"abc":1}`, "")
	f(Limits{MaxKeyLen: 3}, `{"a\u0062c":1}`, "")
	f(Limits{MaxKeyLen: 3}, `{"abcd":1}`, "key length exceeds 3 bytes")
	f(Limits{MaxKeyLen: 3}, `{"éé":1}`, "key length exceeds 3 bytes")
	f(Limits{MaxKeyLen: 3}, `{"ts":1,"values":{"abcd":1}}`, "key length exceeds 3 bytes")
	f(Limits{MaxKeyLen: 3}, `{"a":{"abcd":1}}`, "")              // keys inside JSON values count toward MaxValueLen
	f(Limits{MaxKeyLen: 3}, `{"abcd":1,"ts":1,"values":{}}`, "") // ignored beside a pack

	// MaxValueLen: decoded strings, compact JSON, number text, plain digits.
	big := strings.Repeat("x", 1<<20)
	f(def, `{"a":"`+big+`"}`, "")
	f(def, `{"a":"`+big+`x"}`, `value of key "a": value length exceeds 1048576 bytes`)
	lim := Limits{MaxValueLen: 3}
	tooLong := `value of key "a": value length exceeds 3 bytes`
	f(lim, `{"a":"abc"}`, "")
	f(lim, `{"a":"\u0041\u0042\u0043"}`, "")
	f(lim, `{"a":"abcd"}`, tooLong)
	f(lim, `{"a":"1234"}`, tooLong)
	f(lim, `{"a":[ 1 ]}`, "")
	f(lim, `{"a":[1,2]}`, tooLong)
	f(lim, `{"a":123}`, "")
	f(lim, `{"a":1234}`, tooLong)
	f(lim, `{"a":1e10}`, tooLong)
	f(def, `{"a":1.5e2147483647}`, "")          // kept as the literal, see maxExpand
	f(Limits{MaxValueLen: 5}, `{"a":1e10}`, "") // likewise: "1e10", not 11 digits
}

// longRuns are the shapes of the bodies the fuzz engine stalled on, stretched
// to about n bytes, with what ParseTelemetry says of them ("" for success).
func longRuns(n int) []struct{ name, body, want string } {
	return []struct{ name, body, want string }{
		{"key", `{"` + strings.Repeat("k", n) + `":{"":0}}`, "key length exceeds 255 bytes"},
		{"escaped key", `{"` + strings.Repeat(`\\`, n/2) + `\tues":1}`, "key length exceeds 255 bytes"},
		{"whitespace", strings.Repeat("\n", n) + `{"a":1}`, ""},
		{"bad UTF-8", strings.Repeat("\n", n) + "{\"a\xff", fmt.Sprintf("invalid JSON at offset %d: invalid UTF-8", n+3)},
		{"string", `{"a":"` + strings.Repeat("k", n) + `"}`, ""},
		{"escaped string", `{"a":"` + strings.Repeat(`\\`, n/2) + `"}`, ""},
		{"digits", `{"a":` + strings.Repeat("9", n) + `}`, ""},
		{"JSON whitespace", `{"a":[` + strings.Repeat("\n", n) + `1]}`, ""},
		{"ignored beside a pack", `{"ts":1,"values":{"a":1},"x":"` + strings.Repeat("k", n) + `"}`, ""},
	}
}

// TestLongRuns parses the shapes above at 1 MiB and checks the results. Their
// speed is measured by BenchmarkLongRuns (1 KiB against 1 MiB), not asserted here:
// a quadratic scan would show there, and would make this test take minutes.
func TestLongRuns(t *testing.T) {
	for _, c := range longRuns(1 << 20) {
		_, err := ParseTelemetry(nil, []byte(c.body), now, Limits{})
		if got := fmt.Sprint(err); c.want == "" && err != nil || c.want != "" && got != c.want {
			t.Errorf("%s: got error %v, want %q", c.name, err, c.want)
		}
	}
}

func TestAppendAndAlias(t *testing.T) {
	body := []byte(`{"temperature":26.5,"status":"ok","cfg":{"a":1},"esc":"a\nb"}`)
	dst := []kv.Entry{e(1, "old", kv.LongValue(1))}
	got, err := ParseTelemetry(dst, body, now, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[0].Key != "old" {
		t.Fatalf("got %+v", got)
	}
	inBody := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		b := uintptr(unsafe.Pointer(&body[0]))
		return p >= b && p < b+uintptr(len(body))
	}
	for _, en := range got[1:] {
		if !inBody(en.Key) {
			t.Fatalf("key %q was copied", en.Key)
		}
	}
	if !inBody(got[2].Value.Str) || !inBody(got[3].Value.Str) {
		t.Fatalf("plain string or compact JSON was copied")
	}
	if inBody(got[4].Value.Str) || got[4].Value.Str != "a\nb" {
		t.Fatalf("escaped string must be decoded into its own memory, got %q", got[4].Value.Str)
	}
}

func TestArenaChunks(t *testing.T) {
	// Escaped strings fill several arena chunks; earlier ones must not change.
	var b strings.Builder
	b.WriteByte('{')
	for i := range 500 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":"%s\n%d"`, i, strings.Repeat("x", i%300), i)
	}
	b.WriteByte('}')
	got, err := ParseAttributes(nil, []byte(b.String()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for i, en := range got {
		if want := fmt.Sprintf("%s\n%d", strings.Repeat("x", i%300), i); en.Value.Str != want {
			t.Fatalf("entry %d: got %q, want %q", i, en.Value.Str, want)
		}
	}
}

func TestZeroAllocs(t *testing.T) {
	f := func(name string, body []byte) {
		t.Helper()
		dst := make([]kv.Entry, 0, 1024)
		allocs := testing.AllocsPerRun(100, func() {
			var err error
			if dst, err = ParseTelemetry(dst[:0], body, now, Limits{}); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Fatalf("%s: %v allocs per request, want 0", name, allocs)
		}
	}
	f("single", singleBody)
	f("batch", batchBody)
	f("values first", []byte(`{"values":{"a":1,"b":"x"},"ts":5}`))
	f("string numbers", []byte(`{"a":"42","b":"4.5","c":"-1"}`))
}
