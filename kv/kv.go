// Package kv holds the typed key-value data that flows from the wire to storage:
// one Value type with the five ThingsBoard kinds, and the Entry that pairs it with
// a key and a timestamp. It is a leaf package: everything imports it, it imports nothing.
package kv

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Type is the kind of a Value, numbered as ThingsBoard's KeyValueType.
type Type uint8

const (
	Bool   Type = 1
	Long   Type = 2
	Double Type = 3
	String Type = 4
	JSON   Type = 5
)

func (t Type) String() string {
	switch t {
	case Bool:
		return "BOOLEAN"
	case Long:
		return "LONG"
	case Double:
		return "DOUBLE"
	case String:
		return "STRING"
	case JSON:
		return "JSON"
	}
	return "UNKNOWN"
}

// Value is one typed value. Exactly one of the fields is meaningful, chosen by Type.
// Str holds the text of a String and the compact JSON text of a JSON value.
type Value struct {
	Type   Type
	Bool   bool
	Long   int64
	Double float64
	Str    string
}

// BoolValue, LongValue, DoubleValue, StringValue and JSONValue build Values.
func BoolValue(b bool) Value         { return Value{Type: Bool, Bool: b} }
func LongValue(n int64) Value        { return Value{Type: Long, Long: n} }
func DoubleValue(f float64) Value    { return Value{Type: Double, Double: f} }
func StringValue(s string) Value     { return Value{Type: String, Str: s} }
func JSONValue(compact string) Value { return Value{Type: JSON, Str: compact} }

// Same reports whether v and o are one value: the same type and the same
// meaningful field, Doubles compared bit for bit (so NaN is itself and -0 is not
// 0), which == on the struct does not do.
func (v Value) Same(o Value) bool {
	if v.Type != o.Type {
		return false
	}
	switch v.Type {
	case Bool:
		return v.Bool == o.Bool
	case Long:
		return v.Long == o.Long
	case Double:
		return math.Float64bits(v.Double) == math.Float64bits(o.Double)
	}
	return v.Str == o.Str
}

// Text renders the value the way ThingsBoard's REST API does when strict data
// types are off: every kind as a string, doubles in Java's Double.toString form.
func (v Value) Text() string {
	switch v.Type {
	case Bool:
		return strconv.FormatBool(v.Bool)
	case Long:
		return strconv.FormatInt(v.Long, 10)
	case Double:
		return FormatDouble(v.Double)
	}
	return v.Str
}

// AppendJSON appends the value as a JSON literal with its native type: numbers as
// numbers, JSON values inline, strings quoted. A Double JSON has no number for
// (an aggregate that overflowed) goes as its Java text in a string,
// "Infinity": the document stays JSON.
func (v Value) AppendJSON(dst []byte) []byte {
	switch v.Type {
	case Bool:
		return strconv.AppendBool(dst, v.Bool)
	case Long:
		return strconv.AppendInt(dst, v.Long, 10)
	case Double:
		if math.IsInf(v.Double, 0) || math.IsNaN(v.Double) {
			return AppendJSONString(dst, FormatDouble(v.Double))
		}
		return append(dst, FormatDouble(v.Double)...)
	case JSON:
		return append(dst, v.Str...)
	}
	return AppendJSONString(dst, v.Str)
}

// AppendJSONString appends s as a JSON string literal: quotes, backslashes and
// control characters escaped (\n, \r, \t, else \u00XX), invalid UTF-8 as
// U+FFFD, everything else as it is. Go's quoting (strconv.Quote) is not JSON:
// it writes \x1b, \v and \U0010ffff, which JSON parsers reject.
func AppendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0 // s[start:i] is still to be copied as it is
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			if r, size := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
		}
		dst = append(dst, s[start:i]...)
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default: // a byte of invalid UTF-8
			dst = append(dst, "\ufffd"...)
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Numeric reports the value as a float64 when it is a Long or a Double.
func (v Value) Numeric() (float64, bool) {
	switch v.Type {
	case Long:
		return float64(v.Long), true
	case Double:
		return v.Double, true
	}
	return 0, false
}

// FormatDouble formats f as Java's Double.toString does for the common range
// (42.0, 0.5, 1.0E10), so clients written for ThingsBoard parse what they expect;
// "Infinity", "-Infinity" and "NaN" as Java does too (an aggregate can overflow
// to them; no stored value is one).
func FormatDouble(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	abs := f
	if abs < 0 {
		abs = -abs
	}
	if abs != 0 && (abs < 1e-3 || abs >= 1e7) {
		// Java: scientific with at least one fractional digit and "E".
		s := strconv.FormatFloat(f, 'E', -1, 64)
		mant, exp, _ := strings.Cut(s, "E")
		if !strings.Contains(mant, ".") {
			mant += ".0"
		}
		if exp[0] == '+' {
			exp = exp[1:]
		}
		exp = strings.TrimLeft(exp, "0")
		if strings.HasPrefix(exp, "-") {
			exp = "-" + strings.TrimLeft(exp[1:], "0")
		}
		return mant + "E" + exp
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".NI") {
		s += ".0"
	}
	return s
}

// Entry is one timestamped key-value: a telemetry point, or an attribute with
// its lastUpdateTs in Ts.
type Entry struct {
	Ts    int64
	Key   string
	Value Value
}
