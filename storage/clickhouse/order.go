package clickhouse

import (
	"cmp"
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/internal/series"
	"github.com/sluice-iot/sluice/storage"
)

// Inserts are sent in the table's sort order, (entity_id, key, ts): ClickHouse
// checks whether a block it is about to write as a part is already sorted
// (18.16 too: the MergeTreeDataWriterBlocksAlreadySorted event) and then skips
// its own sort, a permutation of every column that was about a tenth of the
// server's CPU during a spool backlog (bench/RESULTS.md). A delivery is a few
// series, each mostly in time order already, so ordering it here is a bucket
// pass over its rows plus a sort of its series. If the order does not match
// the server's, it sorts as before: nothing depends on it but speed.

// span is what the orderer gathers of one (entity, key) of a batch.
type span struct {
	rows   int   // rows in the batch, then the next free slot in the order
	lastTs int64 // ts of its latest row so far
	sorted bool  // its rows came in ts order
}

// orderer computes insert orders; its index and slices are reused between batches.
type orderer struct {
	index  series.Index
	series []span  // by series number
	of     []int32 // series of each row
	byKey  []int32
	order  []int32
	pairs  []tsRow
	spare  []tsRow // radixByTs's other buffer
}

// compareEntity orders UUIDs as ClickHouse compares them: as a UInt128 whose
// high half is the UUID's last 8 bytes (big-endian), then the first 8.
func compareEntity(a, b uuid.UUID) int {
	if c := cmp.Compare(binary.BigEndian.Uint64(a[8:]), binary.BigEndian.Uint64(b[8:])); c != 0 {
		return c
	}
	return cmp.Compare(binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8]))
}

// sortOrder returns the indexes of rows in (entity, key, ts) order; rows of one
// series with equal ts keep their order. The slice is valid until the next call.
func (o *orderer) sortOrder(rows []storage.Row) []int32 {
	o.index.Reset()
	o.series, o.of = o.series[:0], o.of[:0]
	for i := range rows {
		r := &rows[i]
		s, added := o.index.Of(r.EntityID, r.Key)
		if added {
			o.series = append(o.series, span{lastTs: r.Ts, sorted: true})
		}
		sr := &o.series[s]
		sr.rows++
		if r.Ts < sr.lastTs {
			sr.sorted = false
		}
		sr.lastTs = r.Ts
		o.of = append(o.of, int32(s))
	}

	// Series in order, then each one's first slot.
	byKey := o.byKey[:0]
	for i := range o.series {
		byKey = append(byKey, int32(i))
	}
	o.byKey = byKey
	slices.SortFunc(byKey, func(a, b int32) int {
		x, y := o.index.Key(int(a)), o.index.Key(int(b))
		if c := compareEntity(x.Entity, y.Entity); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	next := 0
	for _, s := range byKey {
		n := o.series[s].rows
		o.series[s].rows = next
		next += n
	}
	o.order = slices.Grow(o.order[:0], len(rows))[:len(rows)]
	for i, s := range o.of {
		o.order[o.series[s].rows] = int32(i)
		o.series[s].rows++
	}
	// A series whose rows were not in time order (older points, batches of one
	// device committed in another order than their times) is sorted on its own
	// (sortByTs).
	start := 0
	for _, s := range byKey {
		end := o.series[s].rows
		if !o.series[s].sorted {
			o.sortByTs(rows, o.order[start:end])
		}
		start = end
	}
	return o.order
}

type tsRow struct {
	ts  int64
	row int32
}

// radixMin is the fewest rows sortByTs sorts by radix; a comparison sort of
// fewer is about as fast.
const radixMin = 256

// sortByTs puts the rows idx of one series (in delivery order) in ts order,
// rows of equal ts staying in delivery order, so the later of two writes of a
// point stays later. It sorts (ts, row) pairs side by side in memory, by radix
// on ts - min(ts) when the series spans less than 2^32 ms (50 days: every live
// delivery), else by comparison. BenchmarkSortOrder, one device's 100,000 rows
// in 1,000 batches committed out of order: 6.9 ms with the comparison sort
// alone, 2.9 ms with the radix sort (in order, no sort: 0.8 ms). The comparison
// sort was 6.7% of a node's CPU at 1M points/s into ClickHouse.
func (o *orderer) sortByTs(rows []storage.Row, idx []int32) {
	pairs := o.pairs[:0]
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, i := range idx {
		ts := rows[i].Ts
		lo, hi = min(lo, ts), max(hi, ts)
		pairs = append(pairs, tsRow{ts, i})
	}
	// The span fits a uint64 even when hi - lo overflows an int64.
	digits := (bits.Len64(uint64(hi)-uint64(lo)) + 7) / 8
	if len(pairs) >= radixMin && digits <= 4 {
		pairs = o.radixByTs(pairs, lo, digits)
	} else {
		slices.SortFunc(pairs, func(a, b tsRow) int {
			if a.ts != b.ts {
				return cmp.Compare(a.ts, b.ts)
			}
			return cmp.Compare(a.row, b.row)
		})
	}
	for j := range pairs {
		idx[j] = pairs[j].row
	}
	o.pairs = pairs
}

// radixByTs sorts pairs by ts with a least-significant-digit radix sort of ts -
// lo, one byte per pass over digits bytes. Each pass is stable, so pairs of
// equal ts keep their order. It returns the sorted pairs, in pairs' memory or
// in o.spare's, and keeps the other as o.spare.
func (o *orderer) radixByTs(pairs []tsRow, lo int64, digits int) []tsRow {
	src, dst := pairs, slices.Grow(o.spare[:0], len(pairs))[:len(pairs)]
	for d := range digits {
		shift := uint(8 * d)
		var at [256]int
		for _, p := range src {
			at[byte((uint64(p.ts)-uint64(lo))>>shift)]++
		}
		if at[byte((uint64(src[0].ts)-uint64(lo))>>shift)] == len(src) {
			continue // one value of this digit: the pass would copy src as it is
		}
		next := 0
		for b, n := range at {
			at[b] = next
			next += n
		}
		for _, p := range src {
			b := byte((uint64(p.ts) - uint64(lo)) >> shift)
			dst[at[b]] = p
			at[b]++
		}
		src, dst = dst, src
	}
	o.spare = dst
	return src
}
