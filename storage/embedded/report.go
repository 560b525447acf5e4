package embedded

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/google/uuid"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

var _ storage.Reporter = (*DB)(nil)

type reportKey struct {
	group  uint32
	key    string
	bucket int64
}

// uniqKey is a value as UNIQ tells values apart: a Double by its bits, as
// ClickHouse's uniqExact does (0.0 and -0.0 are two values), where kv.Value's
// == would take them for one.
type uniqKey struct {
	typ  kv.Type
	b    bool
	n    int64
	bits uint64
	s    string
}

func uniqOf(v kv.Value) uniqKey {
	return uniqKey{typ: v.Type, b: v.Bool, n: v.Long, bits: math.Float64bits(v.Double), s: v.Str}
}

// partial is the aggregate of one (group, key, bucket) over some devices; two
// partials of disjoint device sets merge into the aggregate of both.
type partial struct {
	count, numCount int64
	min, max        float64
	sum, delta      fsum
	uniq            map[uniqKey]struct{}
	latest          kv.Value
	latestTs        int64
	latestDev       uuid.UUID
}

// fsum is a compensated (Neumaier) sum: lo keeps what the additions to hi
// rounded off. Plain float addition depends on the order of the terms, and
// points and devices come in another order here than in ClickHouse, so plain
// sums of doubles such as 0.1 or 23.4 end a few units in the last place apart
// (more with more points); compensated, both (ClickHouse's sumKahan) stay
// within about one unit of the exact sum, which the engine's rounding to 15
// digits (roundSum) then makes one number.
type fsum struct{ hi, lo float64 }

func (s *fsum) add(x float64) {
	t := s.hi + x
	if math.Abs(s.hi) >= math.Abs(x) {
		s.lo += (s.hi - t) + x
	} else {
		s.lo += (x - t) + s.hi
	}
	s.hi = t
}

func (s *fsum) merge(o fsum) {
	s.add(o.hi)
	s.lo += o.lo
}

func (s fsum) value() float64 { return s.hi + s.lo }

func (p *partial) merge(o *partial) {
	if o.count > 0 && (p.count == 0 || newer(o.latestTs, o.latestDev, p.latestTs, p.latestDev)) {
		p.latest, p.latestTs, p.latestDev = o.latest, o.latestTs, o.latestDev
	}
	if o.numCount > 0 {
		if p.numCount == 0 {
			p.min, p.max = o.min, o.max
		} else {
			p.min, p.max = math.Min(p.min, o.min), math.Max(p.max, o.max)
		}
	}
	p.count += o.count
	p.numCount += o.numCount
	p.sum.merge(o.sum)
	p.delta.merge(o.delta)
	if p.uniq == nil {
		p.uniq = o.uniq
	} else {
		for v := range o.uniq {
			p.uniq[v] = struct{}{}
		}
	}
}

// newer: a later ts wins; on equal ts the greater device id (storage.ReportRow).
func newer(ts int64, dev uuid.UUID, thanTs int64, thanDev uuid.UUID) bool {
	if ts != thanTs {
		return ts > thanTs
	}
	return string(dev[:]) > string(thanDev[:])
}

// Report implements storage.Reporter: each device's history of each key is
// scanned once, in ts order, folding points into per-device buckets that are
// merged into their group's. Devices are spread over one worker per CPU.
func (d *DB) Report(ctx context.Context, q storage.ReportQuery) ([]storage.ReportRow, error) {
	if err := d.enter(ctx); err != nil {
		return nil, err
	}
	defer d.leave()
	if len(q.Devices) != len(q.Groups) {
		return nil, fmt.Errorf("embedded: report of %d devices with %d groups", len(q.Devices), len(q.Groups))
	}
	// No devices would also mean no workers, and no results[0] to merge into.
	if q.StartTs >= q.EndTs || len(q.Devices) == 0 || len(q.Keys) == 0 {
		return nil, nil
	}
	workers := min(runtime.GOMAXPROCS(0), len(q.Devices))
	results := make([]map[reportKey]*partial, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acc := map[reportKey]*partial{}
			for i := w; i < len(q.Devices); i += workers {
				for _, key := range q.Keys {
					if err := d.reportSeries(ctx, q, q.Devices[i], q.Groups[i], key, acc); err != nil {
						errs[w] = err
						return
					}
				}
			}
			results[w] = acc
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	all := results[0]
	for _, r := range results[1:] {
		for k, p := range r {
			if have, ok := all[k]; ok {
				have.merge(p)
			} else {
				all[k] = p
			}
		}
	}
	out := make([]storage.ReportRow, 0, len(all))
	for k, p := range all {
		out = append(out, storage.ReportRow{
			Group: k.group, Key: k.key, Bucket: k.bucket, Count: p.count, NumCount: p.numCount,
			Sum: p.sum.value(), Min: p.min, Max: p.max, Uniq: int64(len(p.uniq)),
			Latest: p.latest, LatestTs: p.latestTs, Delta: p.delta.value(),
		})
	}
	return out, nil
}

// reportSeries folds one device's history of key into acc.
func (d *DB) reportSeries(ctx context.Context, q storage.ReportQuery, dev uuid.UUID, group uint32, key string, acc map[reportKey]*partial) error {
	// The device's buckets: points come in ts order but fold buckets (hour of
	// day, …) recur, so each keeps its first and last numeric value until the end.
	type devBucket struct {
		partial
		first, last float64
	}
	buckets := map[int64]*devBucket{}
	var (
		cur       *devBucket
		curBucket int64
	)
	wantUniq := q.Aggs&storage.ReportUniq != 0
	err := scanSeries(ctx, d.pdb, dev, key, q.StartTs, q.EndTs, false, func(p point) bool {
		v, ts := p.v, p.ts
		if b := q.Bucket.Key(storage.WallMs(q.Zone, ts)); cur == nil || b != curBucket {
			if cur = buckets[b]; cur == nil {
				cur = &devBucket{}
				buckets[b] = cur
			}
			curBucket = b
		}
		cur.count++
		// Points come in ts order: the last one seen is the device's latest.
		cur.latest, cur.latestTs, cur.latestDev = v, ts, dev
		if wantUniq {
			if cur.uniq == nil {
				cur.uniq = map[uniqKey]struct{}{}
			}
			cur.uniq[uniqOf(v)] = struct{}{}
		}
		if n, ok := v.Numeric(); ok {
			if cur.numCount == 0 {
				cur.min, cur.max, cur.first = n, n, n
			} else {
				cur.min, cur.max = math.Min(cur.min, n), math.Max(cur.max, n)
			}
			cur.last = n
			cur.numCount++
			cur.sum.add(n)
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("cannot report %q of %s: %w", key, dev, err)
	}
	for b, db := range buckets {
		if db.numCount > 0 {
			db.delta = fsum{hi: db.last - db.first}
		}
		k := reportKey{group, key, b}
		if have, ok := acc[k]; ok {
			have.merge(&db.partial)
		} else {
			p := db.partial
			acc[k] = &p
		}
	}
	return nil
}
