package redis

import (
	"math"
	"testing"

	"github.com/sluice-iot/sluice/kv"
)

// FuzzDecodeValue: an attribute's stored bytes, whatever they are (a key another
// program wrote, another version), decode or fail without a panic, and what
// decodes encodes to bytes that decode to the same again.
func FuzzDecodeValue(f *testing.F) {
	for _, v := range []kv.Value{kv.BoolValue(true), kv.LongValue(-300), kv.DoubleValue(math.NaN()),
		kv.StringValue("é"), kv.JSONValue(`{"a":1}`)} {
		f.Add(string(encodeValue(kv.Entry{Ts: 1700000000000, Key: "k", Value: v})))
	}
	f.Add("")
	f.Add("\x07short")
	f.Add("\x63123456789")
	f.Fuzz(func(t *testing.T, raw string) {
		e, err := decodeValue("k", raw)
		if err != nil {
			return
		}
		once := encodeValue(e)
		again, err := decodeValue("k", string(once))
		if err != nil || again.Ts != e.Ts || string(encodeValue(again)) != string(once) {
			t.Fatalf("%q decoded to %+v, whose encoding %q does not round-trip (%v)", raw, e, once, err)
		}
	})
}
