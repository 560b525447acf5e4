package embedded

import (
	"bytes"
	"math"
	"testing"
)

func TestAppendStringOrder(t *testing.T) {
	// f checks that a < b holds for the encodings and that neither encoding is a
	// prefix of the other, so a prefix scan of one never reaches the other.
	f := func(a, b string) {
		t.Helper()
		ea, eb := appendString(nil, a), appendString(nil, b)
		if bytes.Compare(ea, eb) >= 0 {
			t.Fatalf("%q < %q but encodings %x >= %x", a, b, ea, eb)
		}
		if bytes.HasPrefix(eb, ea) || bytes.HasPrefix(ea, eb) {
			t.Fatalf("encodings of %q and %q prefix each other: %x %x", a, b, ea, eb)
		}
		if bytes.IndexByte(ea[:len(ea)-1], 0) >= 0 {
			t.Fatalf("encoding of %q holds 0x00 before its end: %x", a, ea)
		}
	}
	f("", "\x00")
	f("\x00", "\x01")
	f("\x01", "\x02")
	f("a", "a\x00")
	f("a\x00", "a\x00\x00")
	f("a\x00", "a\x00b")
	f("a\x00b", "a\x01")
	f("a\x01", "a\x01\x00")
	f("a\x01\x00", "a\x02")
	f("temp", "temperature")
	f("a", "b")
	f("ab", "b")
	f("\xff", "\xff\xff")
}

func TestTsOrder(t *testing.T) {
	tss := []int64{math.MinInt64, -1 << 40, -1, 0, 1, 1 << 40, math.MaxInt64}
	for i := 1; i < len(tss); i++ {
		a, b := appendTs(nil, tss[i-1]), appendTs(nil, tss[i])
		if bytes.Compare(a, b) >= 0 {
			t.Fatalf("%d < %d but encodings %x >= %x", tss[i-1], tss[i], a, b)
		}
		if got := decodeTs(b); got != tss[i] {
			t.Fatalf("decodeTs(appendTs(%d)) = %d", tss[i], got)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	f := func(prefix, want []byte) {
		t.Helper()
		if got := prefixEnd(prefix); !bytes.Equal(got, want) {
			t.Fatalf("prefixEnd(%x) = %x, want %x", prefix, got, want)
		}
	}
	f([]byte{'h', 1, 2}, []byte{'h', 1, 3})
	f([]byte{'h', 1, 0xff}, []byte{'h', 2})
	f([]byte{0xff, 0xff}, nil)
}
