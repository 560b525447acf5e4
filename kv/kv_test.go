package kv

import (
	"math"
	"testing"
)

func TestSame(t *testing.T) {
	nan, negZero := math.NaN(), math.Copysign(0, -1)
	for _, c := range []struct {
		a, b Value
		same bool
	}{
		{DoubleValue(nan), DoubleValue(nan), true},
		{DoubleValue(0), DoubleValue(negZero), false},
		{DoubleValue(1.5), DoubleValue(1.5), true},
		{LongValue(1), DoubleValue(1), false},
		{BoolValue(true), BoolValue(true), true},
		{BoolValue(true), BoolValue(false), false},
		{LongValue(-3), LongValue(-3), true},
		{StringValue("a"), StringValue("a"), true},
		{StringValue("1"), JSONValue("1"), false},
		{JSONValue(`{"a":1}`), JSONValue(`{"a":2}`), false},
	} {
		if got := c.a.Same(c.b); got != c.same {
			t.Errorf("%v.Same(%v) = %v", c.a, c.b, got)
		}
	}
}
