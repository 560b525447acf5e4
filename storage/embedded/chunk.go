package embedded

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluice-iot/sluice/kv"
)

// History is stored in chunks. A series' points are grouped into windows of
// windowMs, and each window is one Pebble key (keys.go, table s) whose value is a
// sequence of chunks in write order. Write adds one chunk per series and window
// it touches with a Pebble merge, which appends it; the memtable insert, the
// flush and every compaction then cost one key per series and window instead of
// one per point, and a flush folds the chunks a memtable holds for one window
// into one value (bench/RESULTS.md, "Chunked history").
//
//	chunk = uvarint(n) point × n
//	point = uvarint(Δts) code payload
//
// Δts is the offset of the first point from the window start and of every other
// point from the one before: a chunk's points are in ascending ts order, each ts
// once. The code is a kv.Type or one of the shorter codes below. A kv.Type's
// payload is one byte for Bool, a zig-zag varint for Long, 8 bytes of IEEE bits
// for Double, and uvarint(len) + bytes for String and JSON. Writes use the
// shorter codes where they fit: a point whose value is its predecessor's in the
// chunk (a status string, a flag, a counter at rest) is codeRepeat alone, a Bool
// is its code alone, and a Double with a short decimal form (what a device's JSON
// sends: 23.4) is codeDecimal+e and the zig-zag varint of m, the value being
// m/10^e. The bench's rows went from 21.5 to 11.5 bytes (bench/RESULTS.md,
// "Denser chunks"). Stores written before the shorter codes read unchanged;
// a store written with them cannot be opened by a build from before them.
//
// Two chunks of one window may hold the same ts (a point written twice); the later
// chunk wins, as the later Set of a key would. Reading a window therefore decodes
// every chunk and, unless the chunks came in ts order (the common case: live data
// and backfills both arrive in order), sorts the points stably and keeps the last
// of each ts. The replaced copy stays in the value until a delete rewrites the
// window: rewriting points is rare in telemetry, and the space is bounded by it.

// windowMs is the width of a window. Fixed for the life of a store: it decides
// which key a point lives under. Ten minutes hold 10 points of a series sampled
// every minute and 600 (2-7 KB) of one sampled every second, so a read of the
// newest points decodes little; a 1 kHz series makes windows of 1-6 MB. An hour read
// the report bench about as fast and made the bench's 1.8 kHz device's windows
// 40 MB, which compactions copy whole (bench/RESULTS.md, "Chunked history").
const windowMs = 600_000

// windowOf returns the start of the window holding ts. Windows are aligned on
// math.MinInt64 and the arithmetic is unsigned, so no ts overflows.
func windowOf(ts int64) int64 {
	off := uint64(ts) ^ (1 << 63)
	return int64((off - off%windowMs) ^ (1 << 63))
}

// lastWindow reports whether w is the window with the greatest start: the one
// after it would overflow int64.
func lastWindow(w int64) bool {
	return w > math.MaxInt64-windowMs
}

// point is one decoded history point.
type point struct {
	ts int64
	v  kv.Value
}

// appendChunk appends a chunk of points, which must be in strictly ascending ts
// order within the window starting at window.
func appendChunk(dst []byte, window int64, pts []point) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(pts)))
	prev := window
	for i, p := range pts {
		dst = binary.AppendUvarint(dst, uint64(p.ts-prev))
		prev = p.ts
		if i > 0 && p.v.Same(pts[i-1].v) {
			dst = append(dst, codeRepeat)
			continue
		}
		dst = appendChunkValue(dst, p.v)
	}
	return dst
}

// The codes a chunk's point may have besides a kv.Type (1-5), none with a payload
// but codeDecimal's.
const (
	codeFalse   = 0x10 // Bool false
	codeTrue    = 0x11 // Bool true
	codeRepeat  = 0x12 // the value of the chunk's point before
	codeDecimal = 0x20 // + e for e < len(pow10): a Double m/10^e, zig-zag varint m
)

// pow10 holds the powers of ten a decimal Double may be divided by: all exact in
// a float64, so m/10^e is one correctly rounded division.
var pow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// decimalOf returns m and the smallest e with m/10^e == f to the bit and m exact
// in a float64, or false when there is none (full-precision results of
// arithmetic, -0, NaN, infinities).
func decimalOf(f float64) (m int64, e int, ok bool) {
	if f == 0 && math.Signbit(f) {
		return 0, 0, false
	}
	top := len(pow10) - 1
	for e := range pow10 {
		if e == 3 {
			// Past the places most readings have: if f is m/10^e, it is also
			// 10m/10^(e+1), and f*10^k rounds to the whole number while that is
			// under 2^50 (f is off by at most 2^-53 of it, the product by one ulp
			// more). So a test at the most places such a number allows decides
			// whether to go on: a full-precision double costs four tests, not
			// sixteen (BenchmarkAppendChunk/noise: 34 → 21 ns a point).
			for top >= e && !(math.Abs(f*pow10[top]) < 1<<50) {
				top--
			}
			if top < e {
				return 0, 0, false
			}
			if _, ok := decimalAt(f, top); !ok {
				return 0, 0, false
			}
		}
		if m, ok := decimalAt(f, e); ok {
			return m, e, true
		}
	}
	return 0, 0, false
}

// decimalAt returns m when m/10^e == f to the bit (but for the sign of zero) and
// m is exact in a float64.
func decimalAt(f float64, e int) (int64, bool) {
	// RoundToEven, unlike Round, is one instruction on amd64 and arm64.
	x := math.RoundToEven(f * pow10[e])
	if !(math.Abs(x) < 1<<53) {
		return 0, false // NaN and infinities too
	}
	return int64(x), x/pow10[e] == f
}

func appendChunkValue(dst []byte, v kv.Value) []byte {
	switch v.Type {
	case kv.Bool:
		if v.Bool {
			return append(dst, codeTrue)
		}
		return append(dst, codeFalse)
	case kv.Double:
		if m, e, ok := decimalOf(v.Double); ok {
			return binary.AppendVarint(append(dst, codeDecimal+byte(e)), m)
		}
	}
	dst = append(dst, byte(v.Type))
	if v.Type == kv.String || v.Type == kv.JSON {
		dst = binary.AppendUvarint(dst, uint64(len(v.Str)))
		return append(dst, v.Str...)
	}
	return appendScalar(dst, v)
}

// ref is a point of a window whose value is still encoded, at b[off:] of the
// window's bytes b. Reads find the points they want by ts and decode only those
// values: a dense series' window holds many points a read does not return.
type ref struct {
	ts  int64
	off int
}

// scanWindow appends to dst the points of a window's value b in ascending ts
// order, one per ts, the one written last winning. It checks every byte of b, so
// valueAt cannot fail on what it returns; a value that does not decode is
// reported as corrupt, never a panic.
func scanWindow(dst []ref, window int64, b []byte) ([]ref, error) {
	base := len(dst)
	sorted := true
	// The greatest offset a point may have: the window's last ms, or MaxInt64 in
	// the last window, which ends early.
	maxOff := min(uint64(windowMs-1), uint64(math.MaxInt64)-uint64(window))
	pos := 0
	for pos < len(b) {
		n, size := binary.Uvarint(b[pos:])
		// Every point takes at least two bytes: a bound that keeps a corrupt count
		// from sizing anything.
		if size <= 0 || n == 0 || n > uint64(len(b)-pos) {
			return dst, fmt.Errorf("%w: bad chunk header", errCorrupt)
		}
		pos += size
		off := uint64(0)
		prev := 0 // where the value of the chunk's point before starts
		for i := range n {
			d, size := binary.Uvarint(b[pos:])
			// Only a chunk's first point may sit at offset 0: the others move forward.
			if size <= 0 || d > maxOff-off || d == 0 && i > 0 {
				return dst, fmt.Errorf("%w: bad chunk ts", errCorrupt)
			}
			off += d
			pos += size
			ts := window + int64(off)
			if len(dst) > base && ts <= dst[len(dst)-1].ts {
				sorted = false
			}
			if pos < len(b) && b[pos] == codeRepeat {
				if i == 0 {
					return dst, fmt.Errorf("%w: a chunk's first value repeats", errCorrupt)
				}
				// The point shares the value before, which a read decodes there.
				dst = append(dst, ref{ts, prev})
				pos++
				continue
			}
			dst = append(dst, ref{ts, pos})
			prev = pos
			if pos < len(b) && varintCode(b[pos]) {
				// Most points of a dense series, measured here: a call per point
				// costs a scan about a fifth more.
				if size = varintSize(b[pos+1:]); size == 0 {
					return dst, fmt.Errorf("%w: bad varint", errCorrupt)
				}
				pos += 1 + size
				continue
			}
			size, err := chunkValueSize(b[pos:])
			if err != nil {
				return dst, err
			}
			pos += size
		}
	}
	if !sorted {
		dst = dst[:base+dedupe(dst[base:])]
	}
	return dst, nil
}

// valueAt decodes the value of r, a ref scanWindow returned for b.
func valueAt(b []byte, r ref) kv.Value {
	v, _ := decodeChunkValue(b[r.off:])
	return v
}

// decodeWindow appends to dst the points of a window's value in ascending ts
// order, one per ts, the one written last winning. Strings in the result do not
// alias b.
func decodeWindow(dst []point, window int64, b []byte) ([]point, error) {
	refs, err := scanWindow(nil, window, b)
	if err != nil {
		return dst, err
	}
	for _, r := range refs {
		dst = append(dst, point{r.ts, valueAt(b, r)})
	}
	return dst, nil
}

// dedupe sorts refs by ts, stably, keeps the last of each ts and returns how many
// remain at the front of refs.
func dedupe(refs []ref) int {
	slices.SortStableFunc(refs, func(a, b ref) int { return cmpTs(a.ts, b.ts) })
	n := 0
	for i := range refs {
		if i+1 < len(refs) && refs[i+1].ts == refs[i].ts {
			continue
		}
		refs[n] = refs[i]
		n++
	}
	return n
}

// chunkValueSize returns how many bytes the value at the start of b takes, having
// checked it as decodeChunkValue would. Scans of dense windows call it for every
// point, so the common codes come first and a varint is only measured.
func chunkValueSize(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("%w: missing value", errCorrupt)
	}
	c, p := b[0], b[1:]
	switch {
	case varintCode(c):
		if size := varintSize(p); size > 0 {
			return 1 + size, nil
		}
		return 0, fmt.Errorf("%w: bad varint", errCorrupt)
	case c == codeFalse, c == codeTrue:
		return 1, nil
	}
	switch kv.Type(c) {
	case kv.Bool:
		if len(p) < 1 || p[0] > 1 {
			return 0, fmt.Errorf("%w: bad bool", errCorrupt)
		}
		return 2, nil
	case kv.Double:
		if len(p) < 8 {
			return 0, fmt.Errorf("%w: short double", errCorrupt)
		}
		return 9, nil
	case kv.String, kv.JSON:
		n, size := binary.Uvarint(p)
		if size <= 0 || n > uint64(len(p)-size) {
			return 0, fmt.Errorf("%w: bad string length", errCorrupt)
		}
		return 1 + size + int(n), nil
	}
	return 0, fmt.Errorf("%w: unknown type %d", errCorrupt, c)
}

// varintCode reports whether a value of code c is a varint.
func varintCode(c byte) bool {
	return c >= codeDecimal && c < codeDecimal+byte(len(pow10)) || c == byte(kv.Long)
}

// varintSize returns the length of the varint at the start of p, or 0 when it
// is truncated or overflows 64 bits: binary.Uvarint's checks, without the value.
func varintSize(p []byte) int {
	for i, c := range p {
		if i == binary.MaxVarintLen64-1 {
			if c > 1 {
				return 0
			}
			return i + 1
		}
		if c < 0x80 {
			return i + 1
		}
	}
	return 0
}

// decodeChunkValue decodes the value at the start of b.
func decodeChunkValue(b []byte) (kv.Value, error) {
	size, err := chunkValueSize(b)
	if err != nil {
		return kv.Value{}, err
	}
	p := b[1:size]
	switch b[0] {
	case codeFalse, codeTrue:
		return kv.BoolValue(b[0] == codeTrue), nil
	}
	if e := int(b[0]) - codeDecimal; e >= 0 {
		m, _ := binary.Varint(p)
		return kv.DoubleValue(float64(m) / pow10[e]), nil
	}
	switch t := kv.Type(b[0]); t {
	case kv.Bool:
		return kv.BoolValue(p[0] == 1), nil
	case kv.Long:
		n, _ := binary.Varint(p)
		return kv.LongValue(n), nil
	case kv.Double:
		return kv.DoubleValue(math.Float64frombits(binary.BigEndian.Uint64(p))), nil
	default:
		_, k := binary.Uvarint(p)
		if t == kv.String {
			return kv.StringValue(string(p[k:])), nil
		}
		return kv.JSONValue(string(p[k:])), nil
	}
}

// concatMerger is Pebble's DefaultMerger, the operands of a key concatenated
// oldest first, under the same name (so stores created with the default, before
// chunked history, open unchanged), built in linear time and from pooled
// buffers: DefaultMerger's MergeOlder copies the whole result for every operand,
// quadratic in the operands of one key, and forward iteration and compactions
// merge older operands, of which a busy window's memtable holds thousands.
var concatMerger = &pebble.Merger{
	Name: pebble.DefaultMerger.Name,
	Merge: func(_, value []byte) (pebble.ValueMerger, error) {
		c := concatPool.Get().(*concat)
		c.newer = append(c.newer, value...)
		return c, nil
	},
}

var concatPool = sync.Pool{New: func() any { return new(concat) }}

// concat is one merge. Finish hands Pebble the result with c as its Closer;
// Close returns c, buffers and all, to the pool.
type concat struct {
	newer []byte // the first operand and the newer ones, oldest first
	older []byte // the older operands as received: newest first
	ends  []int  // where each operand in older ends
	out   []byte
}

func (c *concat) MergeNewer(v []byte) error {
	c.newer = append(c.newer, v...)
	return nil
}

func (c *concat) MergeOlder(v []byte) error {
	c.older = append(c.older, v...)
	c.ends = append(c.ends, len(c.older))
	return nil
}

func (c *concat) Finish(bool) ([]byte, io.Closer, error) {
	switch len(c.ends) {
	case 0:
		return c.newer, c, nil
	case 1:
		// The compaction of a window's value with what came since: one older
		// operand, the stored value, often MBs. Appending the newer ones to it
		// saves copying it a second time into out.
		c.older = append(c.older, c.newer...)
		return c.older, c, nil
	}
	c.out = slices.Grow(c.out[:0], len(c.older)+len(c.newer))
	for i := len(c.ends) - 1; i >= 0; i-- {
		start := 0
		if i > 0 {
			start = c.ends[i-1]
		}
		c.out = append(c.out, c.older[start:c.ends[i]]...)
	}
	c.out = append(c.out, c.newer...)
	return c.out, c, nil
}

// maxPooledMerge keeps the buffers of merges of huge windows out of the pool.
// Pooling up to 16 MiB (a 1 kHz series' windows) halved what the bench's batch
// cell allocated and its p99 at half of peak.
const maxPooledMerge = 16 << 20

func (c *concat) Close() error {
	if cap(c.newer)+cap(c.older)+cap(c.out) > maxPooledMerge {
		return nil
	}
	c.newer, c.older, c.ends, c.out = c.newer[:0], c.older[:0], c.ends[:0], c.out[:0]
	concatPool.Put(c)
	return nil
}
