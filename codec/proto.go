package codec

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-iot/sluice/kv"
)

// Protobuf is the decoder of Protocol Buffers bodies: a TelemetryRequest or
// an AttributesRequest of codec/proto/sluice.proto.
//
// It reads the wire format with protowire instead of unmarshalling generated
// messages: that needs no allocation per message, and keys and strings alias
// the body as JSON ones do. Values keep their wire type (bool_v → Bool,
// long_v → Long, double_v → Double, string_v → String, json_v → JSON): there
// is no ThingsBoard string type-casting. json_v must be valid JSON and is
// stored compacted; a non-finite double_v, invalid UTF-8 and a blank key are
// errors. A KeyValue with no value is dropped, or an error when strict, as a
// JSON null. The Limits apply as to JSON bodies. Unknown fields are skipped;
// a known field with another wire type is an error, not silently ignored.
var Protobuf Decoder = protoDecoder{}

type protoDecoder struct{}

func (protoDecoder) Telemetry(dst []kv.Entry, body []byte, now int64, lim Limits, strict bool) ([]kv.Entry, error) {
	return ParseProtoTelemetry(dst, body, now, lim, strict)
}

func (protoDecoder) Attributes(dst []kv.Entry, body []byte, lim Limits, strict bool) ([]kv.Entry, error) {
	return ParseProtoAttributes(dst, body, lim, strict)
}

// ParseProtoTelemetry appends the entries of a protobuf TelemetryRequest to
// dst; a pack with ts 0 gets now. Aliasing and errors are as for
// ParseTelemetry.
func ParseProtoTelemetry(dst []kv.Entry, body []byte, now int64, lim Limits, strict bool) ([]kv.Entry, error) {
	p := protoParser{body: body, lim: lim.withDefaults(), strict: strict, dst: dst, base: len(dst)}
	if err := p.telemetry(body, now); err != nil {
		return dst, err
	}
	return p.dst, nil
}

// ParseProtoAttributes appends the entries of a protobuf AttributesRequest
// (Ts = 0) to dst. Aliasing and errors are as for ParseTelemetry.
func ParseProtoAttributes(dst []kv.Entry, body []byte, lim Limits, strict bool) ([]kv.Entry, error) {
	p := protoParser{body: body, lim: lim.withDefaults(), strict: strict, dst: dst, base: len(dst)}
	if err := p.attributes(body); err != nil {
		return dst, err
	}
	return p.dst, nil
}

type protoParser struct {
	body   []byte
	lim    Limits
	strict bool
	dst    []kv.Entry
	base   int
	arena  arena
}

func (p *protoParser) errorf(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

func (p *protoParser) limitf(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...), Limit: true}
}

// wireError reports a malformed field at rest, the unread part of the body.
func (p *protoParser) wireError(rest []byte, n int) error {
	// protobuf-go prefixes "proto:" and a space or, at random, a no-break space.
	msg := strings.TrimLeft(strings.TrimPrefix(protowire.ParseError(n).Error(), "proto:"), " \u00a0")
	return p.errorf("invalid protobuf at offset %d: %s", len(p.body)-len(rest), msg)
}

// field reads the next field of msg: its number, its wire type and, for
// a known field of the wanted type, its value (raw bytes or a varint/fixed64
// in v). It returns the rest of msg. Unknown fields are skipped (known is
// false); wantType reports the wire type of a known field number, or -1.
func (p *protoParser) field(msg []byte, wantType func(protowire.Number) protowire.Type) (
	num protowire.Number, known bool, raw []byte, v uint64, rest []byte, err error) {
	num, typ, n := protowire.ConsumeTag(msg)
	if n < 0 {
		return 0, false, nil, 0, nil, p.wireError(msg, n)
	}
	if num > protowire.MaxValidNumber {
		return 0, false, nil, 0, nil, p.errorf("invalid protobuf at offset %d: invalid field number", len(p.body)-len(msg))
	}
	rest = msg[n:]
	want := wantType(num)
	if want < 0 {
		if n = protowire.ConsumeFieldValue(num, typ, rest); n < 0 {
			return 0, false, nil, 0, nil, p.wireError(rest, n)
		}
		return num, false, nil, 0, rest[n:], nil
	}
	if typ != want {
		return 0, false, nil, 0, nil, p.errorf("invalid protobuf at offset %d: field %d has wire type %d, want %d",
			len(p.body)-len(msg), num, typ, want)
	}
	switch typ {
	case protowire.VarintType:
		v, n = protowire.ConsumeVarint(rest)
	case protowire.Fixed64Type:
		v, n = protowire.ConsumeFixed64(rest)
	default:
		raw, n = protowire.ConsumeBytes(rest)
	}
	if n < 0 {
		return 0, false, nil, 0, nil, p.wireError(rest, n)
	}
	return num, true, raw, v, rest[n:], nil
}

func telemetryRequestType(num protowire.Number) protowire.Type {
	if num == 1 { // packs
		return protowire.BytesType
	}
	return -1
}

func tsKvListType(num protowire.Number) protowire.Type {
	switch num {
	case 1: // ts
		return protowire.VarintType
	case 2: // kv
		return protowire.BytesType
	}
	return -1
}

func keyValueType(num protowire.Number) protowire.Type {
	switch num {
	case 2, 3: // bool_v, long_v
		return protowire.VarintType
	case 4: // double_v
		return protowire.Fixed64Type
	case 1, 5, 6: // key, string_v, json_v
		return protowire.BytesType
	}
	return -1
}

func attributesRequestType(num protowire.Number) protowire.Type {
	if num == 1 { // AttributesRequest.kv
		return protowire.BytesType
	}
	return -1
}

func (p *protoParser) telemetry(msg []byte, now int64) error {
	for len(msg) > 0 {
		num, known, raw, _, rest, err := p.field(msg, telemetryRequestType)
		if err != nil {
			return err
		}
		if known && num == 1 {
			if err := p.pack(raw, now); err != nil {
				return err
			}
		}
		msg = rest
	}
	return nil
}

// pack reads a TsKvList. Its ts may follow its values on the wire, so the
// entries get their time once the whole message is read.
func (p *protoParser) pack(msg []byte, now int64) error {
	mark := len(p.dst)
	var ts int64
	for len(msg) > 0 {
		num, known, raw, v, rest, err := p.field(msg, tsKvListType)
		if err != nil {
			return err
		}
		switch {
		case !known:
		case num == 1:
			ts = int64(v)
		default:
			if err := p.keyValue(raw, 0); err != nil {
				return err
			}
		}
		msg = rest
	}
	if ts == 0 {
		ts = now
	}
	for i := mark; i < len(p.dst); i++ {
		p.dst[i].Ts = ts
	}
	return nil
}

// attributes reads an AttributesRequest.
func (p *protoParser) attributes(msg []byte) error {
	for len(msg) > 0 {
		num, known, raw, _, rest, err := p.field(msg, attributesRequestType)
		if err != nil {
			return err
		}
		if known && num == 1 {
			if err := p.keyValue(raw, 0); err != nil {
				return err
			}
		}
		msg = rest
	}
	return nil
}

// keyValue reads a KeyValue and appends its entry. As in any protobuf
// message, the last occurrence of a field (or of a oneof member) wins.
func (p *protoParser) keyValue(msg []byte, ts int64) error {
	var (
		key  []byte
		kind protowire.Number // the oneof member set, 0 for none
		raw  []byte
		num  uint64
	)
	for len(msg) > 0 {
		f, known, r, v, rest, err := p.field(msg, keyValueType)
		if err != nil {
			return err
		}
		// A superseded string must still be valid UTF-8: proto3 checks every
		// occurrence, not only the one that wins.
		switch {
		case !known:
		case f == 1:
			if !utf8.Valid(key) {
				return p.errorf("key is not valid UTF-8")
			}
			key = r
		default:
			if (kind == 5 || kind == 6) && !utf8.Valid(raw) {
				return p.errorf("a string value is not valid UTF-8")
			}
			kind, raw, num = f, r, v
		}
		msg = rest
	}
	k, err := p.key(key)
	if err != nil {
		return err
	}
	if kind == 0 {
		if p.strict {
			return p.errorf("Can't parse value: key %q has no value", k)
		}
		return nil
	}
	if len(p.dst)-p.base >= p.lim.MaxEntries {
		return p.limitf("entries exceed %d", p.lim.MaxEntries)
	}
	var val kv.Value
	switch kind {
	case 2:
		val = kv.BoolValue(num != 0)
	case 3:
		val = kv.LongValue(int64(num))
	case 4:
		f := math.Float64frombits(num)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return p.errorf("Can't parse value: %v (key %q)", f, k)
		}
		val = kv.DoubleValue(f)
	case 5:
		if len(raw) > p.lim.MaxValueLen {
			return p.tooLong(k)
		}
		if !utf8.Valid(raw) {
			return p.errorf("value of key %q: string_v is not valid UTF-8", k)
		}
		val = kv.StringValue(aliasBytes(raw))
	case 6:
		s, err := p.jsonValue(k, raw)
		if err != nil {
			return err
		}
		val = kv.JSONValue(s)
	}
	p.dst = append(p.dst, kv.Entry{Ts: ts, Key: k, Value: val})
	return nil
}

// key checks a KeyValue key as the JSON codec checks object keys.
func (p *protoParser) key(b []byte) (string, error) {
	if len(b) > p.lim.MaxKeyLen {
		return "", p.limitf("key length exceeds %d bytes", p.lim.MaxKeyLen)
	}
	if !utf8.Valid(b) {
		return "", p.errorf("key is not valid UTF-8")
	}
	k := aliasBytes(b)
	if blank(k) {
		return "", p.errorf("Key cannot be blank")
	}
	return k, nil
}

// jsonValue validates the JSON text of a json_v with the JSON scanner (and
// its depth and object-key limits) and returns it compacted: aliasing raw when
// it already is, else in the arena.
func (p *protoParser) jsonValue(key string, raw []byte) (string, error) {
	jp := parser{b: raw, lim: p.lim, arena: p.arena}
	defer func() { p.arena = jp.arena }()
	jp.skipWS()
	start := jp.pos
	ws, err := jp.skip(1)
	if err == nil {
		end := jp.pos
		if jp.skipWS(); jp.pos < len(raw) {
			err = jp.syntax(jp.pos, "unexpected data after the JSON value")
		} else if end-start-ws > p.lim.MaxValueLen {
			return "", p.tooLong(key)
		} else if ws == 0 {
			return jp.alias(start, end), nil
		} else {
			return jp.arena.commit(compact(jp.arena.reserve(end-start-ws), raw[start:end])), nil
		}
	}
	return "", p.errorf("value of key %q: json_v: %s", key, err.(*Error).Msg)
}

func (p *protoParser) tooLong(key string) error {
	return p.limitf("value of key %q: value length exceeds %d bytes", key, p.lim.MaxValueLen)
}

func aliasBytes(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
