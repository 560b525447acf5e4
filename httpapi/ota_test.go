package httpapi

import "testing"

func TestParseRange(t *testing.T) {
	f := func(spec string, size, from, to int64, ok bool) {
		t.Helper()
		gf, gt, gok := parseRange(spec, size)
		if gok != ok || (ok && (gf != from || gt != to)) {
			t.Fatalf("parseRange(%q, %d) = %d, %d, %v; want %d, %d, %v", spec, size, gf, gt, gok, from, to, ok)
		}
	}
	f("bytes=0-9", 100, 0, 9, true)
	f("bytes=10-", 100, 10, 99, true)
	f("bytes=90-200", 100, 90, 99, true) // clipped to the body
	f("bytes=-10", 100, 90, 99, true)
	f("bytes=-200", 100, 0, 99, true)
	f(" bytes= 5-5 ", 100, 5, 5, true)
	f("bytes=100-", 100, 100, 99, true) // unsatisfiable: from >= size
	f("bytes=-0", 100, 100, 100, true)  // unsatisfiable
	// Not one byte range: ignored.
	f("bytes=0-1,5-6", 100, 0, 0, false)
	f("items=0-1", 100, 0, 0, false)
	f("bytes=5-1", 100, 0, 0, false)
	f("bytes=a-b", 100, 0, 0, false)
	f("bytes=5", 100, 0, 0, false)
	f("bytes=--5", 100, 0, 0, false)
}
