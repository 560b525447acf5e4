package codec

import (
	"math"
	"strings"
	"testing"

	"github.com/sluice-iot/sluice/kv"
)

// typingTable is the compat doc's "Value typing (device → server)" table, one
// JSON value per call, as ThingsBoard's JsonConverter types it.
func typingTable(f func(value string, want kv.Value)) {
	long, double, str, js := kv.LongValue, kv.DoubleValue, kv.StringValue, kv.JSONValue

	// Booleans.
	f(`true`, kv.BoolValue(true))
	f(`false`, kv.BoolValue(false))

	// Integral numbers without a simple-double look are LONG.
	f(`73`, long(73))
	f(`-73`, long(-73))
	f(`0`, long(0))
	f(`-0`, long(0))
	f(`4.2e1`, long(42))
	f(`4.2E1`, long(42))
	f(`4.2e+1`, long(42))
	f(`42e0`, long(42))
	f(`1e2`, long(100))
	f(`1.0e2`, long(100))
	f(`4200e-2`, long(42))
	f(`0e-20`, long(0))
	f(`0.0e5`, long(0))
	f(`9223372036854775807`, long(math.MaxInt64))
	f(`-9223372036854775808`, long(math.MinInt64))
	f(`9.223372036854775807e18`, long(math.MaxInt64))

	// A long that overflows becomes its plain digits.
	f(`9223372036854775808`, str("9223372036854775808"))
	f(`-9223372036854775809`, str("-9223372036854775809"))
	f(`123456789012345678901234567890`, str("123456789012345678901234567890"))
	f(`1e19`, str("10000000000000000000"))
	f(`-1.5e30`, str("-1500000000000000000000000000000"))
	f(`1e100`, str("1"+strings.Repeat("0", 100)))
	f(`100000000000000000000.0e0`, str("100000000000000000000.0")) // toPlainString keeps the scale

	// Simple doubles and fractions are DOUBLE while scale <= 16.
	f(`42.0`, double(42))
	f(`42.50`, double(42.5))
	f(`3.14`, double(3.14))
	f(`0.0`, double(0))
	f(`-0.0`, double(0)) // BigDecimal has no negative zero
	f(`-2.5`, double(-2.5))
	f(`4.25e1`, double(42.5))
	f(`1e-2`, double(0.01))
	f(`1.5e-15`, double(1.5e-15))
	f(`1.0000000000000001`, double(1.0000000000000001))
	f(`123456789012345678901234567890.5`, double(123456789012345678901234567890.5))

	// Past scale 16 the value is kept as its plain digits.
	f(`1.00000000000000001`, str("1.00000000000000001"))
	f(`0.10000000000000000`, str("0.10000000000000000"))
	f(`1e-17`, str("0.00000000000000001"))
	f(`-1e-17`, str("-0.00000000000000001"))
	f(`1.5e-16`, str("0.00000000000000015"))
	f(`0.000000000000000000`, str("0.000000000000000000"))
	f(`-0.000000000000000000`, str("0.000000000000000000"))
	f(`3.14159265358979323846`, str("3.14159265358979323846"))

	// Too big for a double: the digits, not Infinity (Sluice decision).
	f(`1`+strings.Repeat("0", 400)+`.5`, str("1"+strings.Repeat("0", 400)+".5"))

	// Plain digits more than maxExpand bytes longer than the literal: the
	// literal as sent (Sluice decision, BigDecimal would print them all).
	f(`1e400`, str("1e400"))
	f(`-1.5e2147483647`, str("-1.5e2147483647"))
	f(`1e-200`, str("1e-200"))

	// Strings that NumberUtils.isParsable accepts follow the number rules.
	f(`"42"`, long(42))
	f(`"-42"`, long(-42))
	f(`"007"`, long(7))
	f(`"-0"`, long(0))
	f(`"4.5"`, double(4.5))
	f(`"42.0"`, double(42))
	f(`".5"`, double(0.5))
	f(`"-.5"`, double(-0.5))
	f(`"9223372036854775808"`, str("9223372036854775808"))
	f(`"00009223372036854775808"`, str("9223372036854775808"))
	f(`"1.00000000000000001"`, str("1.00000000000000001"))
	f(`"\u0034\u0032"`, long(42))
	f(`"١٢٣"`, long(123))     // Arabic-Indic digits: Character.isDigit and BigDecimal take them
	f(`"４２.５"`, double(42.5)) // fullwidth

	// Other strings are STRING.
	f(`"hello"`, str("hello"))
	f(`""`, str(""))
	f(`"4.2e1"`, str("4.2e1"))
	f(`"+5"`, str("+5"))
	f(`"5."`, str("5."))
	f(`"."`, str("."))
	f(`"-"`, str("-"))
	f(`"--5"`, str("--5"))
	f(`" 5"`, str(" 5"))
	f(`"5 "`, str("5 "))
	f(`"1.2.3"`, str("1.2.3"))
	f(`"0x1F"`, str("0x1F"))
	f(`"NaN"`, str("NaN"))
	f(`"Infinity"`, str("Infinity"))
	f(`"true"`, str("true"))
	f(`"1,5"`, str("1,5"))
	f(`"𝟒𝟐"`, str("𝟒𝟐")) // supplementary digits are surrogate pairs to Java, not digits
	f(`"h\"i\\\/\b\f\n\r\t"`, str("h\"i\\/\b\f\n\r\t"))
	f(`"\u00e9\u20AC"`, str("é€"))
	f(`"\ud83d\ude00"`, str("😀"))
	f(`"\ud800"`, str("\uFFFD"))
	f(`"\udc00x"`, str("\uFFFDx"))
	f(`"\ud800\u0041"`, str("\uFFFDA"))
	f(`"\ud800\ud800\udc00"`, str("\uFFFD\U00010000"))
	f(`"é€😀"`, str("é€😀"))

	// Objects and arrays are JSON, compact, in sent order, escapes as sent.
	f(`{}`, js(`{}`))
	f(`[]`, js(`[]`))
	f(`[ ]`, js(`[]`))
	f(`{"b":1,"a":[1, 2 ,{"c" : "x y"}]}`, js(`{"b":1,"a":[1,2,{"c":"x y"}]}`))
	f(`[ "a\"  b" , null, true, false ]`, js(`["a\"  b",null,true,false]`))
	f(`{"z":1,"a":2,"z":3}`, js(`{"z":1,"a":2,"z":3}`))
	f(`{"a":"\u00e9\ud800"}`, js(`{"a":"\u00e9\ud800"}`))
	f("[\n\t1,\r\n\t-1.50e+3\n]", js(`[1,-1.50e+3]`))
	f(`[[[[]]]]`, js(`[[[[]]]]`))
}

func TestValueTyping(t *testing.T) {
	f := func(value string, want kv.Value) {
		t.Helper()
		body := `{"k":` + value + `}`
		got, err := ParseAttributes(nil, []byte(body), Limits{})
		if err != nil {
			t.Fatalf("%s: unexpected error: %s", body, err)
		}
		if len(got) != 1 || got[0].Key != "k" || got[0].Ts != 0 {
			t.Fatalf("%s: got %+v, want one entry k", body, got)
		}
		if !got[0].Value.Same(want) {
			t.Fatalf("%s: got %s %q (%v), want %s %q (%v)", body,
				got[0].Value.Type, got[0].Value.Str, got[0].Value.Text(), want.Type, want.Str, want.Text())
		}
	}
	typingTable(f)
}

func TestParsable(t *testing.T) {
	f := func(s string, want bool) {
		t.Helper()
		if got, _ := parsable(s); got != want {
			t.Fatalf("parsable(%q) = %v, want %v", s, got, want)
		}
	}
	f("", false)
	f("-", false)
	f(".", false)
	f("5.", false)
	f("-.", false)
	f("1..2", false)
	f("1.2.3", false)
	f("+1", false)
	f("1e5", false)
	f("1 ", false)
	f("0x10", false)
	f("0", true)
	f("-0", true)
	f(".5", true)
	f("-.5", true)
	f("0012.50", true)
	f("٣", true)
	f("٣.٣", true)
	f("𝟒", false)
	f("Ⅻ", false) // a letter number, not Nd
}

func TestDigitValue(t *testing.T) {
	f := func(r rune, want rune) {
		t.Helper()
		if got := digitValue(r); got != want {
			t.Fatalf("digitValue(%U) = %d, want %d", r, got, want)
		}
	}
	f('0', 0)
	f('9', 9)
	f('٠', 0)
	f('٩', 9)
	f('０', 0)
	f('７', 7)
	f('໕', 5) // Lao
}
