package storagetest

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

func testAggregate(t *testing.T, open func(t *testing.T) storage.Backend) {
	b := open(t)
	id := uuid.New()
	// Buckets of 10 over [100, 145):
	//   [100,110) Longs only   [110,120) Long and Double   [120,130) empty
	//   [130,140) Doubles only [140,145) non-numeric only, clipped to the range end
	// Values are exact binary fractions so that no summation order changes a result.
	write(t, b, id,
		long(99, "v", 1000), // before the range
		long(101, "v", 1), long(105, "v", 5),
		long(111, "v", 2), double(112, "v", 0.5),
		double(131, "v", 1.5), double(133, "v", 2.25),
		str(141, "v", "x"), kv.Entry{Ts: 142, Key: "v", Value: kv.BoolValue(true)}, kv.Entry{Ts: 143, Key: "v", Value: kv.JSONValue(`{"a":1}`)},
		long(145, "v", 1000), // at the range end
	)
	f := func(agg storage.Agg, want ...kv.Entry) {
		t.Helper()
		q := storage.ReadQuery{EntityID: id, Key: "v", StartTs: 100, EndTs: 145, Interval: 10, Agg: agg, Asc: true}
		got, err := b.Read(t.Context(), q)
		must(t, err)
		checkEntries(t, "ascending", got, want)

		q.Asc = false
		got, err = b.Read(t.Context(), q)
		must(t, err)
		var rev []kv.Entry
		for i := len(want) - 1; i >= 0; i-- {
			rev = append(rev, want[i])
		}
		checkEntries(t, "descending", got, rev)
	}
	f(storage.AggMin, long(105, "v", 1), double(115, "v", 0.5), double(135, "v", 1.5))
	f(storage.AggMax, long(105, "v", 5), double(115, "v", 2), double(135, "v", 2.25))
	f(storage.AggSum, long(105, "v", 6), double(115, "v", 2.5), double(135, "v", 3.75))
	f(storage.AggAvg, double(105, "v", 3), double(115, "v", 1.25), double(135, "v", 1.875))
	f(storage.AggCount, long(105, "v", 2), long(115, "v", 2), long(135, "v", 2), long(142, "v", 3))

	t.Run("LongSumIsExact", func(t *testing.T) {
		// 2^53+1 is not a float64; a sum through doubles would lose the 1.
		write(t, b, id, long(1000, "big", 1<<53+1), long(1001, "big", 1))
		got, err := b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "big", StartTs: 1000, EndTs: 1010, Interval: 10, Agg: storage.AggSum})
		must(t, err)
		checkEntries(t, "sum", got, []kv.Entry{long(1005, "big", 1<<53+2)})
		got, err = b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "big", StartTs: 1000, EndTs: 1010, Interval: 10, Agg: storage.AggMax})
		must(t, err)
		checkEntries(t, "max", got, []kv.Entry{long(1005, "big", 1<<53+1)})
	})

	t.Run("LongSumPastInt64", func(t *testing.T) {
		// Past int64 the sum is a Double, not a wrapped Long; the AVG too is
		// computed without wrapping. A total back within int64 stays an exact Long.
		const big = 9_000_000_000_000_000_000
		write(t, b, id, long(5000, "over", big), long(5001, "over", big),
			long(5010, "back", big), long(5011, "back", big), long(5012, "back", -big))
		q := storage.ReadQuery{EntityID: id, Key: "over", StartTs: 5000, EndTs: 5010, Interval: 10, Agg: storage.AggSum}
		got, err := b.Read(t.Context(), q)
		must(t, err)
		checkEntries(t, "sum", got, []kv.Entry{double(5005, "over", 2*float64(big))})
		q.Agg = storage.AggAvg
		got, err = b.Read(t.Context(), q)
		must(t, err)
		checkEntries(t, "avg", got, []kv.Entry{double(5005, "over", float64(big))})
		q = storage.ReadQuery{EntityID: id, Key: "back", StartTs: 5010, EndTs: 5020, Interval: 10, Agg: storage.AggSum}
		got, err = b.Read(t.Context(), q)
		must(t, err)
		checkEntries(t, "sum back in range", got, []kv.Entry{long(5015, "back", big)})
	})

	t.Run("RangeWiderThanHalfOfInt64", func(t *testing.T) {
		// ts - StartTs and EndTs - bucket overflow int64 here: buckets are
		// worked out unsigned.
		start, end := int64(math.MinInt64+10), int64(math.MaxInt64-10)
		const interval = int64(1) << 62
		write(t, b, id, long(-5, "wide", 1), long(0, "wide", 2), long(1_700_000_000_000, "wide", 4), long(end-1, "wide", 8))
		got, err := b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "wide", StartTs: start, EndTs: end, Interval: interval, Agg: storage.AggSum, Asc: true})
		must(t, err)
		bucket := func(ts int64) int64 {
			off := uint64(ts - start)
			return start + int64(off-off%uint64(interval))
		}
		mid := func(b int64) int64 {
			w := uint64(interval)
			if rest := uint64(end - b); rest < w {
				w = rest
			}
			return b + int64(w/2)
		}
		var want []kv.Entry
		for _, p := range []kv.Entry{long(-5, "", 1), long(0, "", 2), long(1_700_000_000_000, "", 4), long(end-1, "", 8)} {
			m := mid(bucket(p.Ts))
			if n := len(want); n > 0 && want[n-1].Ts == m {
				want[n-1].Value.Long += p.Value.Long
			} else {
				want = append(want, long(m, "wide", p.Value.Long))
			}
		}
		checkEntries(t, "sum", got, want)
	})

	t.Run("NegativeLongs", func(t *testing.T) {
		write(t, b, id, long(2000, "neg", -5), long(2001, "neg", math.MinInt64+10), long(2002, "neg", -1))
		q := storage.ReadQuery{EntityID: id, Key: "neg", StartTs: 2000, EndTs: 2010, Interval: 10}
		for _, tc := range []struct {
			agg  storage.Agg
			want int64
		}{{storage.AggMin, math.MinInt64 + 10}, {storage.AggMax, -1}} {
			q.Agg = tc.agg
			got, err := b.Read(t.Context(), q)
			must(t, err)
			checkEntries(t, "min/max", got, []kv.Entry{long(2005, "neg", tc.want)})
		}
	})

	t.Run("NoLimit", func(t *testing.T) {
		var es []kv.Entry
		for i := range int64(150) {
			es = append(es, long(3000+i, "many", i))
		}
		write(t, b, id, es...)
		got, err := b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "many", StartTs: 3000, EndTs: 3150, Interval: 1, Agg: storage.AggCount, Limit: 5})
		must(t, err)
		if len(got) != 150 || got[0].Ts != 3149 || got[0].Value.Long != 1 {
			t.Fatalf("got %d buckets, want 150 newest first of COUNT 1", len(got))
		}
	})

	t.Run("Midpoints", func(t *testing.T) {
		// Buckets of 7 over [4000, 4016) start at 4000, 4007 and 4014; the last is
		// clipped to [4014, 4016), so its midpoint is 4015, not 4014+7/2.
		write(t, b, id, long(4000, "mid", 1), long(4013, "mid", 1), long(4015, "mid", 1))
		got, err := b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "mid", StartTs: 4000, EndTs: 4016, Interval: 7, Agg: storage.AggCount, Asc: true})
		must(t, err)
		checkEntries(t, "count", got, []kv.Entry{long(4003, "mid", 1), long(4010, "mid", 1), long(4015, "mid", 1)})
	})

	t.Run("Edges", func(t *testing.T) {
		// Calendar buckets: a clipped first one, inner ones of several widths,
		// a clipped last one; the range starts below zero.
		edges := []int64{-40, -38, -20, -9, 20, 21}
		write(t, b, id, long(-41, "cal", 1000), long(-40, "cal", 1), long(-39, "cal", 2),
			long(-38, "cal", 4), long(-21, "cal", 8), long(-9, "cal", 16), long(19, "cal", 32), long(20, "cal", 64), long(21, "cal", 1000))
		q := storage.ReadQuery{EntityID: id, Key: "cal", StartTs: -40, EndTs: 21, Agg: storage.AggSum, Edges: edges, Asc: true}
		got, err := b.Read(t.Context(), q)
		must(t, err)
		// Bucket [-20, -9) is empty and left out; each point sits in the middle
		// of its bucket.
		checkEntries(t, "sum", got, []kv.Entry{long(-39, "cal", 3), long(-29, "cal", 12), long(5, "cal", 48), long(20, "cal", 64)})
		q.Asc = false
		got, err = b.Read(t.Context(), q)
		must(t, err)
		checkEntries(t, "sum, newest first", got, []kv.Entry{long(20, "cal", 64), long(5, "cal", 48), long(-29, "cal", 12), long(-39, "cal", 3)})

		// Many uneven buckets, as months are, against a count done here.
		rnd := rand.New(rand.NewPCG(7, 11))
		edges = []int64{-3000, -3000 + 1 + rnd.Int64N(5)}
		for range 300 {
			edges = append(edges, edges[len(edges)-1]+28+rnd.Int64N(4))
		}
		edges = append(edges, edges[len(edges)-1]+1+rnd.Int64N(31))
		var pts []kv.Entry
		for ts := edges[0] - 5; ts < edges[len(edges)-1]+5; ts += 1 + rnd.Int64N(5) {
			pts = append(pts, long(ts, "months", 1))
		}
		write(t, b, id, pts...)
		var want []kv.Entry
		for i := range len(edges) - 1 {
			n := int64(0)
			for _, p := range pts {
				if p.Ts >= edges[i] && p.Ts < edges[i+1] {
					n++
				}
			}
			if n > 0 {
				want = append(want, long(storage.EdgeMid(edges, i), "months", n))
			}
		}
		q = storage.ReadQuery{EntityID: id, Key: "months", StartTs: edges[0], EndTs: edges[len(edges)-1], Agg: storage.AggCount, Edges: edges, Asc: true}
		got, err = b.Read(t.Context(), q)
		must(t, err)
		checkEntries(t, "count", got, want)
	})

	t.Run("EpochEdges", func(t *testing.T) {
		// Months of 2024 in milliseconds since the epoch, past 2^32, with a
		// clipped first and last bucket, as an intervalType=MONTH read makes
		// them (ClickHouse typed such literals UInt64 and failed on 18.16).
		start := time.Date(2024, 1, 10, 0, 0, 0, 0, time.UTC).UnixMilli()
		edges := []int64{start}
		for m := time.February; m <= time.December; m++ {
			edges = append(edges, time.Date(2024, m, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
		}
		edges = append(edges, time.Date(2024, 12, 20, 0, 0, 0, 0, time.UTC).UnixMilli())
		var pts, want []kv.Entry
		for i := range len(edges) - 1 {
			pts = append(pts, long(edges[i], "epochMonths", int64(i+1)), long(edges[i+1]-1, "epochMonths", int64(i+1)))
			want = append(want, long(storage.EdgeMid(edges, i), "epochMonths", 2*int64(i+1)))
		}
		write(t, b, id, pts...)
		got, err := b.Read(t.Context(), storage.ReadQuery{EntityID: id, Key: "epochMonths", StartTs: edges[0], EndTs: edges[len(edges)-1], Agg: storage.AggSum, Edges: edges, Asc: true})
		must(t, err)
		checkEntries(t, "sum", got, want)
	})
}
