package embedded

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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
