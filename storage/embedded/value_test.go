package embedded

import (
	"errors"
	"math"
	"testing"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

func TestValueRoundTrip(t *testing.T) {
	f := func(v kv.Value) {
		t.Helper()
		got, err := decodeValue(appendValue(nil, v))
		if err != nil || got != v {
			t.Fatalf("round trip of %+v: got %+v, %v", v, got, err)
		}
	}
	f(kv.BoolValue(true))
	f(kv.BoolValue(false))
	f(kv.LongValue(0))
	f(kv.LongValue(math.MinInt64))
	f(kv.LongValue(math.MaxInt64))
	f(kv.DoubleValue(math.Inf(-1)))
	f(kv.DoubleValue(math.SmallestNonzeroFloat64))
	f(kv.StringValue(""))
	f(kv.StringValue("a\x00b"))
	f(kv.JSONValue(`{"a":1}`))
}

func TestDecodeValueCorrupt(t *testing.T) {
	f := func(b []byte) {
		t.Helper()
		if _, err := decodeValue(b); !errors.Is(err, errCorrupt) {
			t.Fatalf("decodeValue(%x): got %v, want errCorrupt", b, err)
		}
	}
	f(nil)
	f([]byte{0})
	f([]byte{byte(kv.Bool)})
	f([]byte{byte(kv.Long)})
	f([]byte{byte(kv.Long), 0x80})
	f([]byte{byte(kv.Double), 1, 2, 3})
	f([]byte{9, 1})
}

func TestRecordRoundTrip(t *testing.T) {
	f := func(r storage.Record) {
		t.Helper()
		got, err := decodeRecord(r.Kind, r.ID, appendRecord(nil, r))
		if err != nil || got.Owner != r.Owner || string(got.Data) != string(r.Data) || len(got.Unique) != len(r.Unique) {
			t.Fatalf("round trip of %+v: got %+v, %v", r, got, err)
		}
		for i := range r.Unique {
			if got.Unique[i] != r.Unique[i] {
				t.Fatalf("round trip of %+v: got %+v", r, got)
			}
		}
	}
	f(storage.Record{Kind: "tenant", ID: uuid.New()})
	f(storage.Record{Kind: "device", ID: uuid.New(), Owner: uuid.New(), Data: []byte("{}"), Unique: []string{"name:a", "", "token:\x00"}})
	if _, err := decodeRecord("k", uuid.Nil, []byte{1, 2}); !errors.Is(err, errCorrupt) {
		t.Fatalf("short record: got %v, want errCorrupt", err)
	}
}

// FuzzDecodeValue: stored values and stamped entries, whatever their bytes (a
// damaged disk, a folder from another version), decode or fail without a panic,
// and what decodes encodes to bytes that decode to the same again.
func FuzzDecodeValue(f *testing.F) {
	for _, v := range []kv.Value{kv.BoolValue(true), kv.LongValue(-300), kv.DoubleValue(math.NaN()),
		kv.StringValue("é"), kv.JSONValue(`{"a":1}`)} {
		f.Add(appendValue(nil, v))
		f.Add(appendStamped(nil, 1700000000000, v))
	}
	f.Add([]byte{})
	f.Add([]byte{byte(kv.Long), 0x80})
	f.Add([]byte{99})
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := decodeValue(b); err == nil {
			once := appendValue(nil, v)
			again, err := decodeValue(once)
			if err != nil || string(appendValue(nil, again)) != string(once) {
				t.Fatalf("%x decoded to %+v, whose encoding %x does not round-trip (%v)", b, v, once, err)
			}
		}
		if e, err := decodeEntry("k", b); err == nil {
			once := appendStamped(nil, e.Ts, e.Value)
			again, err := decodeEntry("k", once)
			if err != nil || again.Ts != e.Ts || string(appendStamped(nil, again.Ts, again.Value)) != string(once) {
				t.Fatalf("%x decoded to %+v, whose encoding %x does not round-trip (%v)", b, e, once, err)
			}
		}
	})
}
