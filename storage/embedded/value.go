package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sluice-iot/sluice/kv"
)

// Values are stored as the kv.Type byte followed by the payload: one byte 0/1 for
// Bool, a zig-zag varint for Long (small counters stay small), 8 bytes of IEEE bits
// for Double, and the raw text for String and JSON.

var errCorrupt = errors.New("corrupt value")

func appendValue(dst []byte, v kv.Value) []byte {
	dst = append(dst, byte(v.Type))
	if v.Type == kv.String || v.Type == kv.JSON {
		return append(dst, v.Str...)
	}
	return appendScalar(dst, v)
}

// appendScalar appends the payload of a Bool, Long or Double; history chunks
// (chunk.go) encode a Long, and a Double with no short decimal form, the same way.
func appendScalar(dst []byte, v kv.Value) []byte {
	switch v.Type {
	case kv.Bool:
		if v.Bool {
			return append(dst, 1)
		}
		return append(dst, 0)
	case kv.Long:
		return binary.AppendVarint(dst, v.Long)
	case kv.Double:
		return binary.BigEndian.AppendUint64(dst, math.Float64bits(v.Double))
	}
	return dst
}

// decodeValue decodes what appendValue wrote; the result holds no reference to b.
func decodeValue(b []byte) (kv.Value, error) {
	if len(b) == 0 {
		return kv.Value{}, errCorrupt
	}
	t, p := kv.Type(b[0]), b[1:]
	switch t {
	case kv.Bool:
		if len(p) != 1 {
			return kv.Value{}, fmt.Errorf("%w: bool of %d bytes", errCorrupt, len(p))
		}
		return kv.BoolValue(p[0] != 0), nil
	case kv.Long:
		n, size := binary.Varint(p)
		if size <= 0 || size != len(p) {
			return kv.Value{}, fmt.Errorf("%w: bad long varint", errCorrupt)
		}
		return kv.LongValue(n), nil
	case kv.Double:
		if len(p) != 8 {
			return kv.Value{}, fmt.Errorf("%w: double of %d bytes", errCorrupt, len(p))
		}
		return kv.DoubleValue(math.Float64frombits(binary.BigEndian.Uint64(p))), nil
	case kv.String:
		return kv.StringValue(string(p)), nil
	case kv.JSON:
		return kv.JSONValue(string(p)), nil
	}
	return kv.Value{}, fmt.Errorf("%w: unknown type %d", errCorrupt, t)
}

// appendStamped encodes a latest value or an attribute: ts (8 bytes) then the value.
func appendStamped(dst []byte, ts int64, v kv.Value) []byte {
	return appendValue(binary.BigEndian.AppendUint64(dst, uint64(ts)), v)
}

func stampedTs(b []byte) (int64, error) {
	if len(b) < 8 {
		return 0, fmt.Errorf("%w: stamped value of %d bytes", errCorrupt, len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// decodeEntry decodes a stamped value into an entry of key.
func decodeEntry(key string, b []byte) (kv.Entry, error) {
	ts, err := stampedTs(b)
	if err != nil {
		return kv.Entry{}, err
	}
	v, err := decodeValue(b[8:])
	if err != nil {
		return kv.Entry{}, err
	}
	return kv.Entry{Ts: ts, Key: key, Value: v}, nil
}
