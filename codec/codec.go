// Package codec turns device and REST request bodies into typed kv.Entry
// values. Decoders are registered by Content-Type (registry.go): JSON, the
// default, follows ThingsBoard's JsonConverter (type-cast on, its default) and is
// described below; Protocol Buffers (proto.go, schema in proto/sluice.proto)
// keep their wire types.
//
// Telemetry takes three forms: {"k":v,...} at now; {"ts":T,"values":{...}};
// and an array mixing both. Attributes are one {"k":v,...} object.
//
// Typing, per value:
//   - true/false → Bool
//   - a number is read as java.math.BigDecimal: Long when integral and not a
//     "simple double" (a '.' and no exponent), so 73 and 4.2e1 are Long and
//     42.0 is Double; a Long that overflows int64 becomes a String of its plain
//     digits; other numbers are Double when their scale is at most 16, else a
//     String of the plain digits (BigDecimal.toPlainString).
//   - a string that NumberUtils.isParsable accepts ("42", "-4.5", ".5", also
//     non-ASCII decimal digits) gets the number rules; other strings → String.
//   - an object or array → JSON holding its text without insignificant
//     whitespace; key order, duplicate keys and string escapes are kept as sent.
//   - null is dropped; the Strict variants (the REST path) reject it with
//     "Can't parse value: null".
//
// Where Sluice departs from ThingsBoard, on purpose:
//   - Only strict RFC 8259 JSON in UTF-8 is accepted. Gson's lenient extras
//     (single quotes, unquoted words, comments, NaN) and invalid UTF-8 are
//     errors. An escaped lone surrogate decodes to U+FFFD.
//   - "ts" must hold an integral number (or a string of one) within int64;
//     ThingsBoard truncates 1.5 to 1, Sluice rejects it. Keys other than "ts"
//     and "values" beside them are ignored, as in ThingsBoard.
//   - A number too large for a double (a 400-digit "1…9.5") becomes a String
//     of its digits instead of Infinity; a number whose plain digits would be
//     more than 128 bytes longer than its literal (1e400) becomes a String of
//     the literal as sent, so ten body bytes cannot turn into a megabyte.
//   - A duplicate key yields one entry per occurrence, in body order, so a
//     store that applies entries in order keeps the last, as ThingsBoard does.
//   - A blank key (empty or only whitespace) is an error on every path, not
//     only on REST. MaxKeyLen applies to entry keys; keys inside a JSON value
//     count toward MaxValueLen only.
//
// Parser choice: a hand-written byte scanner in the style of nats-server's
// server/parser.go, not sonic's ast.Preorder visitor. Measured on the payloads
// in codec_bench_test.go (2-CPU AMD EPYC), per request:
//
//	                      single point (6 keys)   100 {"ts","values"} packs
//	this scanner          ~220 ns, 0 allocs       ~18 µs, 0 allocs
//	sonic Preorder        ~300 ns, 0 allocs       ~29 µs, 0 allocs
//	encoding/json → any   ~1300 ns, 21 allocs     ~140 µs, 1814 allocs
//
// The sonic row is a bare visitor that only appends entries: no ThingsBoard
// typing, no "ts"/"values" handling, no JSON values. It would also have had to
// re-encode nested values from events and re-parse numbers from json.Number,
// while the scanner keeps the raw span of a JSON value (aliased when already
// compact) and of a string without escapes.
package codec

import "github.com/sluice-iot/sluice/kv"

// Limits bound what one request may contain. Zero fields take the defaults.
type Limits struct {
	MaxDepth      int // nesting depth of any JSON, default 32 (top-level object = depth 1)
	MaxObjectKeys int // keys in any one JSON object, default 1000
	MaxEntries    int // entries produced by one request, default 100000
	MaxKeyLen     int // bytes in a key, default 255
	MaxValueLen   int // bytes of a string or JSON value, default 1<<20
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxDepth, 32)
	def(&l.MaxObjectKeys, 1000)
	def(&l.MaxEntries, 100000)
	def(&l.MaxKeyLen, 255)
	def(&l.MaxValueLen, 1<<20)
	return l
}

// Error is a parse error; the HTTP layer answers it with 400 and Msg. Limit
// tells a body past one of the Limits from one that is not valid.
type Error struct {
	Msg   string
	Limit bool
}

func (e *Error) Error() string { return e.Msg }

// ParseTelemetry appends the entries of a telemetry body in any of the three
// forms to dst. Entries without a "ts" get now. Key and Value.Str may alias
// body (zero-copy): they are valid only while body is unchanged. A null value
// is dropped, as on ThingsBoard's device API. On error dst is returned as it was.
func ParseTelemetry(dst []kv.Entry, body []byte, now int64, lim Limits) ([]kv.Entry, error) {
	return parse(dst, body, now, lim, false, true)
}

// ParseTelemetryStrict is ParseTelemetry for the REST API, where a null value
// is an error ("Can't parse value: null") instead of being dropped.
func ParseTelemetryStrict(dst []kv.Entry, body []byte, now int64, lim Limits) ([]kv.Entry, error) {
	return parse(dst, body, now, lim, true, true)
}

// ParseAttributes appends the entries of a JSON object body (Ts = 0) to dst.
// Aliasing, null and errors are as for ParseTelemetry.
func ParseAttributes(dst []kv.Entry, body []byte, lim Limits) ([]kv.Entry, error) {
	return parse(dst, body, 0, lim, false, false)
}

// ParseAttributesStrict is ParseAttributes for the REST API, where a null
// value is an error ("Can't parse value: null").
func ParseAttributesStrict(dst []kv.Entry, body []byte, lim Limits) ([]kv.Entry, error) {
	return parse(dst, body, 0, lim, true, false)
}

func parse(dst []kv.Entry, body []byte, now int64, lim Limits, strict, telemetry bool) ([]kv.Entry, error) {
	p := parser{b: body, lim: lim.withDefaults(), strict: strict, dst: dst, base: len(dst)}
	var err error
	if telemetry {
		err = p.telemetry(now)
	} else {
		err = p.attributes()
	}
	if err == nil {
		p.skipWS()
		if p.pos < len(p.b) {
			err = p.syntax(p.pos, "unexpected data after the JSON value")
		}
	}
	if err != nil {
		return dst, err
	}
	return p.dst, nil
}
