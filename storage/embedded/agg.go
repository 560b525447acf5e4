package embedded

import (
	"math"

	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/storage"
)

// accumulator folds the values of one bucket with the typing rules of
// storage.ReadQuery: Longs stay Long until a Double joins, AVG is Double, COUNT
// counts every value, and non-numeric values count for COUNT only. A sum of
// Longs past the int64 range is a Double, not a wrapped Long (longsOverflow).
type accumulator struct {
	agg   storage.Agg
	count int64 // every value

	longs                     int64
	longMin, longMax, longSum int64
	longFSum                  float64 // the Longs' sum as a Double: AVG, and SUM past int64

	doubles                int64
	dblMin, dblMax, dblSum float64
}

func (a *accumulator) add(v kv.Value) {
	a.count++
	switch v.Type {
	case kv.Long:
		n := v.Long
		if a.longs == 0 || n < a.longMin {
			a.longMin = n
		}
		if a.longs == 0 || n > a.longMax {
			a.longMax = n
		}
		a.longSum += n // wraps past int64; exact again if the total fits
		a.longFSum += float64(n)
		a.longs++
	case kv.Double:
		f := v.Double
		if a.doubles == 0 || f < a.dblMin {
			a.dblMin = f
		}
		if a.doubles == 0 || f > a.dblMax {
			a.dblMax = f
		}
		a.dblSum += f
		a.doubles++
	}
}

// longsOverflow tells whether a sum of Longs, summed as Doubles into fsum, lies
// outside int64, where the exact sum wraps; the ClickHouse store decides alike.
func longsOverflow(fsum float64) bool { return math.Abs(fsum) >= 0x1p63 }

// result gives the bucket's value, or false when the bucket has no point for agg.
func (a *accumulator) result() (kv.Value, bool) {
	if a.agg == storage.AggCount {
		return kv.LongValue(a.count), a.count > 0
	}
	if a.longs+a.doubles == 0 {
		return kv.Value{}, false
	}
	if a.agg == storage.AggAvg {
		return kv.DoubleValue((a.longFSum + a.dblSum) / float64(a.longs+a.doubles)), true
	}
	if a.doubles == 0 && !(a.agg == storage.AggSum && longsOverflow(a.longFSum)) {
		switch a.agg {
		case storage.AggMin:
			return kv.LongValue(a.longMin), true
		case storage.AggMax:
			return kv.LongValue(a.longMax), true
		case storage.AggSum:
			return kv.LongValue(a.longSum), true
		}
		return kv.Value{}, false
	}
	switch a.agg {
	case storage.AggMin:
		if a.longs > 0 && float64(a.longMin) < a.dblMin {
			return kv.DoubleValue(float64(a.longMin)), true
		}
		return kv.DoubleValue(a.dblMin), true
	case storage.AggMax:
		if a.longs > 0 && float64(a.longMax) > a.dblMax {
			return kv.DoubleValue(float64(a.longMax)), true
		}
		return kv.DoubleValue(a.dblMax), true
	case storage.AggSum:
		return kv.DoubleValue(a.longFSum + a.dblSum), true
	}
	return kv.Value{}, false
}
