package embedded

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluice-iot/sluice/kv"
)

func TestWindowOf(t *testing.T) {
	for _, ts := range []int64{math.MinInt64, math.MinInt64 + 1, -windowMs - 1, -1, 0, 1, windowMs - 1, windowMs, 1_700_000_000_000, math.MaxInt64 - windowMs, math.MaxInt64} {
		w := windowOf(ts)
		if w > ts || uint64(ts)-uint64(w) >= windowMs {
			t.Errorf("windowOf(%d) = %d: ts outside its window", ts, w)
		}
		if windowOf(w) != w {
			t.Errorf("windowOf(%d) = %d, not a fixed point", ts, w)
		}
		if !lastWindow(w) && windowOf(w+windowMs) != w+windowMs {
			t.Errorf("the window after %d does not start at %d", w, w+windowMs)
		}
	}
	if !lastWindow(windowOf(math.MaxInt64)) || lastWindow(windowOf(math.MaxInt64-windowMs)) {
		t.Error("lastWindow is wrong at the top of int64")
	}
}

func TestChunkRoundTrip(t *testing.T) {
	vals := []kv.Value{
		kv.BoolValue(true), kv.BoolValue(false), kv.LongValue(0), kv.LongValue(math.MinInt64),
		kv.LongValue(math.MaxInt64), kv.DoubleValue(math.Inf(-1)), kv.DoubleValue(-0.5),
		kv.StringValue(""), kv.StringValue("a\x00b"), kv.JSONValue(`{"a":[1]}`),
	}
	for _, w := range []int64{windowOf(math.MinInt64), windowOf(-1), 0, windowOf(1_700_000_000_000), windowOf(math.MaxInt64)} {
		var pts []point
		step := int64(windowMs / len(vals))
		if lastWindow(w) {
			step = 1 // it ends at MaxInt64, early
		}
		for i, v := range vals {
			pts = append(pts, point{w + int64(i)*step, v})
		}
		pts[len(pts)-1].ts = w + windowMs - 1 // the last ms of the window
		if lastWindow(w) {
			pts[len(pts)-1].ts = math.MaxInt64
		}
		b := appendChunk(nil, w, pts)
		got, err := decodeWindow(nil, w, b)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(pts) {
			t.Fatalf("window %d: got %v, %v\nwant %v", w, got, err, pts)
		}
	}
}

// TestDecodeWindowLaterWins: chunks concatenated in write order decode to one
// point per ts, the later chunk's, in ts order.
func TestDecodeWindowLaterWins(t *testing.T) {
	l := kv.LongValue
	b := appendChunk(nil, 0, []point{{10, l(1)}, {20, l(2)}, {30, l(3)}})
	b = appendChunk(b, 0, []point{{5, l(4)}, {20, l(5)}})
	b = appendChunk(b, 0, []point{{0, l(6)}, {30, l(7)}})
	b = appendChunk(b, 0, []point{{30, l(8)}})
	got, err := decodeWindow([]point{{-1, l(0)}}, 0, b)
	want := []point{{-1, l(0)}, {0, l(6)}, {5, l(4)}, {10, l(1)}, {20, l(5)}, {30, l(8)}}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, %v\nwant %v", got, err, want)
	}
}

func TestDecodeWindowCorrupt(t *testing.T) {
	good := appendChunk(nil, 0, []point{{1, kv.StringValue("abc")}, {2, kv.LongValue(-3)}})
	for name, b := range map[string][]byte{
		"empty count":      {0},
		"count too big":    {200, 1},
		"truncated":        good[:len(good)-1],
		"ts past window":   appendChunk(nil, 0, []point{{windowMs, kv.LongValue(1)}}),
		"repeated ts":      {2, 5, byte(kv.Long), 2, 0, byte(kv.Long), 2},
		"unknown type":     {1, 1, 99},
		"unknown code":     {1, 1, codeDecimal + byte(len(pow10))},
		"first repeats":    {1, 1, codeRepeat},
		"bad decimal":      {1, 1, codeDecimal, 0xff},
		"long string":      {1, 1, byte(kv.String), 9, 'a'},
		"bad bool":         {1, 1, byte(kv.Bool), 2},
		"short double":     {1, 1, byte(kv.Double), 1, 2, 3},
		"varint too long":  {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"trailing garbage": append(slices.Clone(good), 1),
	} {
		if _, err := decodeWindow(nil, 0, b); err == nil {
			t.Errorf("%s: decoded % x", name, b)
		}
	}
	// The point keys of the windows overflowing ts are caught too.
	top := windowOf(math.MaxInt64)
	past := uint64(math.MaxInt64-top) + 1 // the offset of MaxInt64 + 1
	if past >= windowMs {
		t.Fatalf("the last window is whole with windowMs %d: pick a case that overflows", windowMs)
	}
	b := append(binary.AppendUvarint([]byte{1}, past), byte(kv.Long), 2)
	if _, err := decodeWindow(nil, top, b); err == nil {
		t.Error("a ts past MaxInt64 decoded")
	}
}

// FuzzDecodeWindow: any value decodes or errors without panic; what decodes is in
// strictly ascending ts order inside the window and survives a round trip.
func FuzzDecodeWindow(f *testing.F) {
	f.Add(int64(0), appendChunk(nil, 0, []point{{1, kv.StringValue("abc")}, {2, kv.LongValue(-3)}}))
	f.Add(windowOf(-5), appendChunk(appendChunk(nil, windowOf(-5), []point{{-5, kv.DoubleValue(1)}}), windowOf(-5), []point{{-7, kv.BoolValue(true)}, {-5, kv.JSONValue("{}")}}))
	f.Add(windowOf(math.MaxInt64), appendChunk(nil, windowOf(math.MaxInt64), []point{{math.MaxInt64, kv.LongValue(1)}}))
	f.Add(int64(0), appendChunk(nil, 0, []point{{1, kv.DoubleValue(23.4)}, {2, kv.DoubleValue(23.4)}, {3, kv.BoolValue(false)}, {4, kv.DoubleValue(1.0 / 3)}}))
	f.Fuzz(func(t *testing.T, ts int64, b []byte) {
		w := windowOf(ts)
		pts, err := decodeWindow(nil, w, b)
		if err != nil {
			return
		}
		for i, p := range pts {
			if windowOf(p.ts) != w || i > 0 && p.ts <= pts[i-1].ts {
				t.Fatalf("point %d of %v outside the window or out of order", i, pts)
			}
		}
		if len(pts) == 0 {
			return
		}
		again, err := decodeWindow(nil, w, appendChunk(nil, w, pts))
		if err != nil || fmt.Sprint(again) != fmt.Sprint(pts) {
			t.Fatalf("round trip: %v, %v\nwant %v", again, err, pts)
		}
	})
}

// TestConcatMerger: the merger gives Pebble's DefaultMerger's result, whose name
// it takes, for any operands and either merge direction.
func TestConcatMerger(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		ops := make([][]byte, 1+rnd.IntN(20))
		for i := range ops {
			ops[i] = make([]byte, rnd.IntN(5))
			for j := range ops[i] {
				ops[i][j] = byte(rnd.IntN(256))
			}
		}
		want := bytes.Join(ops, nil)
		for _, m := range []*pebble.Merger{concatMerger, pebble.DefaultMerger} {
			// Oldest first, newer merged in.
			vm, _ := m.Merge(nil, ops[0])
			for _, op := range ops[1:] {
				vm.MergeNewer(op)
			}
			got, _, _ := vm.Finish(true)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s merging newer: % x, want % x", m.Name, got, want)
			}
			// Newest first, older merged in.
			vm, _ = m.Merge(nil, ops[len(ops)-1])
			for i := len(ops) - 2; i >= 0; i-- {
				vm.MergeOlder(ops[i])
			}
			got, _, _ = vm.Finish(true)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s merging older: % x, want % x", m.Name, got, want)
			}
		}
	}
	if concatMerger.Name != pebble.DefaultMerger.Name {
		t.Fatal("stores created with the default merger would not open")
	}
}

// BenchmarkConcatMergeOlder is a compaction's merge of a dense series' stored
// window (6 MB: ten minutes of a 1 kHz series) with the chunk written since.
func BenchmarkConcatMergeOlder(b *testing.B) {
	stored := bytes.Repeat([]byte{1}, 6<<20)
	newer := bytes.Repeat([]byte{2}, 4<<10)
	b.SetBytes(int64(len(stored) + len(newer)))
	for b.Loop() {
		vm, _ := concatMerger.Merge(nil, newer)
		vm.MergeOlder(stored)
		_, closer, _ := vm.Finish(true)
		closer.Close()
	}
}

// TestChunkShortCodes: values a device sends often take the short codes, every
// value comes back to the bit, and what has no short form keeps its kv.Type.
func TestChunkShortCodes(t *testing.T) {
	d := kv.DoubleValue
	tenth, fifth := 0.1, 0.2 // variables: constant arithmetic would be exact
	for _, c := range []struct {
		v    kv.Value
		code byte
	}{
		{kv.BoolValue(false), codeFalse},
		{kv.BoolValue(true), codeTrue},
		{d(0), codeDecimal},
		{d(23), codeDecimal},
		{d(23.4), codeDecimal + 1},
		{d(-4.35), codeDecimal + 2},
		{d(0.1), codeDecimal + 1},
		{d(1e15), codeDecimal},
		{d(0.000123456), codeDecimal + 9},
		{d(tenth + fifth), byte(kv.Double)}, // 0.30000000000000004: 17 digits
		{d(1.0 / 3), byte(kv.Double)},
		{d(math.Copysign(0, -1)), byte(kv.Double)},
		{d(math.NaN()), byte(kv.Double)},
		{d(math.Inf(1)), byte(kv.Double)},
		{d(1e300), byte(kv.Double)},
		{d(5e-324), byte(kv.Double)},
		{d(1 << 53), byte(kv.Double)},
		{kv.LongValue(7), byte(kv.Long)},
		{kv.StringValue("ok"), byte(kv.String)},
	} {
		b := appendChunk(nil, 0, []point{{1, c.v}, {2, c.v}})
		// count, Δts, the value, Δts, codeRepeat
		if b[2] != c.code || b[len(b)-1] != codeRepeat {
			t.Errorf("%v: % x, want code %#x and a repeat", c.v, b, c.code)
		}
		got, err := decodeWindow(nil, 0, b)
		if err != nil || len(got) != 2 || !got[0].v.Same(c.v) || !got[1].v.Same(c.v) {
			t.Errorf("%v: decoded %v, %v", c.v, got, err)
		}
	}
	// The bench's row (loadtest.AppendTelemetry) in a chunk per key, 1 ms apart.
	var size, before int
	for _, col := range [][]kv.Value{
		{d(23.4), d(24.5), d(25.6)},
		{kv.LongValue(75), kv.LongValue(76), kv.LongValue(77)},
		{kv.BoolValue(true), kv.BoolValue(true), kv.BoolValue(true)},
		{kv.StringValue("ok"), kv.StringValue("ok"), kv.StringValue("ok")},
	} {
		pts := []point{{1, col[0]}, {2, col[1]}, {3, col[2]}}
		size += len(appendChunk(nil, 0, pts)) - 1
		before += 3 + 9 + 2*3 + 3 + 4 + len(col[0].Str) // Δts, code and payload in the first form
	}
	if size*2 > before+before/10 {
		t.Errorf("three bench rows take %d bytes, %d before the short codes", size, before)
	}
}

// TestDecimalOfParsed: every decimal of up to 15 significant digits, parsed as a
// device's JSON would be, takes the decimal code and decodes to the same bits.
func TestDecimalOfParsed(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		digits := 1 + rnd.IntN(15)
		m := rnd.Int64N(int64(math.Pow10(digits)))
		if rnd.IntN(2) == 0 {
			m = -m
		}
		e := rnd.IntN(digits + 1)
		s := strconv.FormatInt(m, 10)
		neg := m < 0
		if neg {
			s = s[1:]
		}
		for len(s) <= e {
			s = "0" + s
		}
		s = s[:len(s)-e] + "." + s[len(s)-e:]
		if neg {
			s = "-" + s
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatal(err)
		}
		if f == 0 {
			continue // "-0.0" parses to -0, which has no decimal form
		}
		gm, ge, ok := decimalOf(f)
		if !ok || ge > e {
			t.Fatalf("%s: decimalOf = %d, %d, %v", s, gm, ge, ok)
		}
		v, err := decodeChunkValue(appendChunkValue(nil, kv.DoubleValue(f)))
		if err != nil || math.Float64bits(v.Double) != math.Float64bits(f) {
			t.Fatalf("%s: decoded %v, %v", s, v, err)
		}
	}
}

// TestDecodeWindowFirstForm: chunks written before the short codes (a Bool with its
// byte, a Double in 8 bytes, no repeats) still decode.
func TestDecodeWindowFirstForm(t *testing.T) {
	b := []byte{3,
		1, byte(kv.Bool), 1,
		1, byte(kv.Double), 0x40, 0x37, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, // 23.4
		1, byte(kv.String), 2, 'o', 'k',
	}
	got, err := decodeWindow(nil, 0, b)
	want := []point{{1, kv.BoolValue(true)}, {2, kv.DoubleValue(23.4)}, {3, kv.StringValue("ok")}}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, %v\nwant %v", got, err, want)
	}
}

// TestDecodeWindowRepeatLaterWins: a repeat is its own chunk's value before, also
// when a later chunk replaces some of the points around it.
func TestDecodeWindowRepeatLaterWins(t *testing.T) {
	s := kv.StringValue
	b := appendChunk(nil, 0, []point{{10, s("a")}, {20, s("a")}, {30, s("a")}, {40, s("b")}, {50, s("b")}})
	b = appendChunk(b, 0, []point{{10, s("c")}, {40, s("c")}, {45, s("c")}})
	got, err := decodeWindow(nil, 0, b)
	want := []point{{10, s("c")}, {20, s("a")}, {30, s("a")}, {40, s("c")}, {45, s("c")}, {50, s("b")}}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, %v\nwant %v", got, err, want)
	}
}

// BenchmarkAppendChunk encodes a ten-second chunk of a 1 kHz series: decimals as a
// device sends them, and full-precision doubles, decimalOf's worst case (noise:
// fifteen powers of ten tried for each).
func BenchmarkAppendChunk(b *testing.B) {
	for _, c := range []struct {
		name string
		v    func(i int) float64
	}{
		{"decimal", func(i int) float64 { return 20 + float64(i%100)/10 }},
		{"thirds", func(i int) float64 { return float64(i) / 3 }},
		{"noise", func(i int) float64 { return 20 + math.Sin(float64(i)/1000) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			pts := make([]point, 10000)
			for i := range pts {
				pts[i] = point{int64(i), kv.DoubleValue(c.v(i))}
			}
			var buf []byte
			for b.Loop() {
				buf = appendChunk(buf[:0], 0, pts)
			}
			b.ReportMetric(float64(len(buf))/float64(len(pts)), "bytes/point")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pts)), "ns/point")
		})
	}
}
