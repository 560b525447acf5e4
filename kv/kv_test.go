package kv

import (
	"encoding/json"
	"math"
	"testing"
	"unicode/utf8"
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

func TestAppendJSONString(t *testing.T) {
	for in, want := range map[string]string{
		"":                  `""`,
		"plain 23.4 °C":     `"plain 23.4 °C"`,
		"q\"b\\s/":          `"q\"b\\s/"`,
		"\n\r\t":            `"\n\r\t"`,
		"\x1b[31mERR\x00":   `"\u001b[31mERR\u0000"`,
		"x\vy\x7f":          `"x\u000by` + "\x7f" + `"`,
		"\U000e0001 \u2028": "\"\U000e0001 \u2028\"",
		"bad \xff utf8":     "\"bad \ufffd utf8\"",
	} {
		got := string(AppendJSONString([]byte("pre"), in))
		if got != "pre"+want {
			t.Errorf("%q: got %s, want %s", in, got[3:], want)
		}
	}
}

// FuzzAppendJSONString: what it writes is JSON, and it reads back as the input
// when that is valid UTF-8.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\x1b\x00\x7f", "\xff\xfe", "é\u2028\U0001F600", "\\u0000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := AppendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q: %s is not JSON: %v", s, b, err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("%q: read back %q", s, back)
		}
	})
}

// TestFormatDouble: Java's Double.toString forms, the non-finite ones included
// (an aggregate may overflow), and a JSON document whatever the value.
func TestFormatDouble(t *testing.T) {
	for f, want := range map[float64]string{
		42: "42.0", 0.5: "0.5", -2.5: "-2.5", 0: "0.0", 1e10: "1.0E10", 1.5e-5: "1.5E-5",
		-1e300: "-1.0E300", math.Inf(1): "Infinity", math.Inf(-1): "-Infinity", math.NaN(): "NaN",
	} {
		if got := FormatDouble(f); got != want {
			t.Errorf("FormatDouble(%v) = %s, want %s", f, got, want)
		}
		if js := DoubleValue(f).AppendJSON(nil); !json.Valid(js) {
			t.Errorf("AppendJSON(%v) = %s: not JSON", f, js)
		}
	}
}
