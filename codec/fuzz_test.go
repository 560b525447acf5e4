package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"math/big"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/sluice-iot/sluice/kv"
)

// fuzzLimits are small so the fuzzer reaches every limit.
var fuzzLimits = Limits{MaxDepth: 6, MaxObjectKeys: 8, MaxEntries: 16, MaxKeyLen: 12, MaxValueLen: 40}

// maxFuzzBody caps the bodies the parse targets check while fuzzing; `go test`
// still runs every seed in full, whatever its size.
//
// The cap keeps the engine from stalling, not the parser: that is linear
// (TestLongRuns, BenchmarkLongRuns). The engine minimizes every input that adds
// coverage, and its minimizer tries up to n²/2 deletions on an n-byte input for
// up to -fuzzminimizetime (60s). Its 8-bit edge counters wrap past 255, so a
// run of 255+ like bytes (a long key, leading whitespace) yields hit-count
// buckets that few deletions keep: a 1 KB body meant ~500k candidates at
// 30-80µs each, minimizations ran from 8s to past the end of the run, and
// both workers sat at "0/sec". At 256 bytes a minimization is at most ~33k
// candidates; the longest seen took 0.5s. Nothing is lost: fuzzLimits bring
// every limit within 256 bytes, and TestLimits checks the default ones at
// full size.
const maxFuzzBody = 256

// fuzzing reports whether this is a -fuzz run rather than `go test` running
// the seed corpus.
var fuzzing = sync.OnceValue(func() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
})

// validJSON is what the parsers must agree with: RFC 8259 JSON in UTF-8.
func validJSON(body []byte) bool { return json.Valid(body) && utf8.Valid(body) }

func addSeeds(f *testing.F) {
	telemetryTable(func(body string, _ ...kv.Entry) { f.Add([]byte(body)) })
	errorTable(func(body, _ string, _ bool) { f.Add([]byte(body)) })
	typingTable(func(value string, _ kv.Value) {
		f.Add([]byte(`{"k":` + value + `}`))
		f.Add([]byte(`[{"ts":1,"values":{"k":` + value + `}},{"k":` + value + `}]`))
	})
}

func FuzzParseTelemetry(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > maxFuzzBody && fuzzing() {
			return
		}
		valid := validJSON(body)
		for _, lim := range []Limits{{}, fuzzLimits} {
			got, err := ParseTelemetry(nil, body, now, lim)
			checkParse(t, body, valid, got, err, lim)
			strict, serr := ParseTelemetryStrict(nil, body, now, lim)
			checkStrict(t, body, got, err, strict, serr)
		}
	})
}

func FuzzParseAttributes(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > maxFuzzBody && fuzzing() {
			return
		}
		valid := validJSON(body)
		for _, lim := range []Limits{{}, fuzzLimits} {
			got, err := ParseAttributes(nil, body, lim)
			checkParse(t, body, valid, got, err, lim)
			for _, en := range got {
				if en.Ts != 0 {
					t.Fatalf("%q: attribute with ts %d", body, en.Ts)
				}
			}
			strict, serr := ParseAttributesStrict(nil, body, lim)
			checkStrict(t, body, got, err, strict, serr)
		}
	})
}

// checkParse asserts what holds for any body: errors are *Error, syntax
// errors only for bodies that are not valid UTF-8 JSON (valid is
// validJSON(body)), and every entry is well-typed and within the limits.
func checkParse(t *testing.T, body []byte, valid bool, got []kv.Entry, err error, lim Limits) {
	t.Helper()
	lim = lim.withDefaults()
	if err != nil {
		var pe *Error
		if !errors.As(err, &pe) {
			t.Fatalf("%q: error %T %v, want *Error", body, err, err)
		}
		if strings.HasPrefix(pe.Msg, "invalid JSON") && valid {
			t.Fatalf("%q: valid JSON rejected: %s", body, pe.Msg)
		}
		if got != nil {
			t.Fatalf("%q: entries returned with error", body)
		}
		return
	}
	if !valid {
		t.Fatalf("%q: invalid JSON accepted", body)
	}
	if len(got) > lim.MaxEntries {
		t.Fatalf("%q: %d entries over MaxEntries", body, len(got))
	}
	for _, en := range got {
		if blank(en.Key) || len(en.Key) > lim.MaxKeyLen || !utf8.ValidString(en.Key) {
			t.Fatalf("%q: bad key %q", body, en.Key)
		}
		v := en.Value
		switch v.Type {
		case kv.Bool, kv.Long:
		case kv.Double:
			if math.IsInf(v.Double, 0) || math.IsNaN(v.Double) || math.Signbit(v.Double) && v.Double == 0 {
				t.Fatalf("%q: bad double %v", body, v.Double)
			}
		case kv.String:
			if !utf8.ValidString(v.Str) || len(v.Str) > lim.MaxValueLen {
				t.Fatalf("%q: bad string %q", body, v.Str)
			}
		case kv.JSON:
			var buf bytes.Buffer
			if err := json.Compact(&buf, []byte(v.Str)); err != nil || buf.String() != v.Str || len(v.Str) > lim.MaxValueLen {
				t.Fatalf("%q: bad JSON value %q (%v)", body, v.Str, err)
			}
			if c := v.Str[0]; c != '{' && c != '[' {
				t.Fatalf("%q: JSON value %q is not an object or array", body, v.Str)
			}
		default:
			t.Fatalf("%q: bad type %d", body, v.Type)
		}
	}
}

// checkStrict asserts that strict parsing differs only by refusing null.
func checkStrict(t *testing.T, body []byte, got []kv.Entry, err error, strict []kv.Entry, serr error) {
	t.Helper()
	if serr != nil {
		if err == nil && serr.Error() != "Can't parse value: null" {
			t.Fatalf("%q: strict failed with %v where lenient succeeded", body, serr)
		}
		return
	}
	if err != nil {
		t.Fatalf("%q: strict succeeded where lenient failed with %v", body, err)
	}
	if len(strict) != len(got) {
		t.Fatalf("%q: strict gave %d entries, lenient %d", body, len(strict), len(got))
	}
	for i := range got {
		if got[i].Ts != strict[i].Ts || got[i].Key != strict[i].Key || !got[i].Value.Same(strict[i].Value) {
			t.Fatalf("%q: strict entry %d differs", body, i)
		}
	}
}

// numberText matches both grammars typeNumber takes: JSON numbers and
// NumberUtils.isParsable text.
var numberText = regexp.MustCompile(`^-?[0-9]*\.?[0-9]*([eE][+-]?[0-9]{1,3})?$`)

// FuzzTypeNumber checks typeNumber against a math/big model of BigDecimal.
func FuzzTypeNumber(f *testing.F) {
	typingTable(func(value string, _ kv.Value) {
		f.Add(strings.Trim(value, `"`))
	})
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 200 || !numberText.MatchString(s) || !strings.ContainsAny(s, "0123456789") ||
			strings.HasPrefix(strings.TrimPrefix(s, "-"), ".") && strings.ContainsAny(s, "eE") {
			return
		}
		mant, _, _ := strings.Cut(strings.ToLower(s), "e")
		if strings.HasSuffix(mant, ".") || strings.Trim(mant, "-.") == "" {
			return
		}
		var got kv.Value
		if !typeNumber(&got, s, 1<<20) {
			t.Fatalf("typeNumber(%q) failed", s)
		}
		if want := bigDecimalModel(s); !got.Same(want) {
			t.Fatalf("typeNumber(%q) = %s %v %q, want %s %v %q", s, got.Type, got.Text(), got.Str, want.Type, want.Text(), want.Str)
		}
	})
}

// bigDecimalModel types s with math/big, straight from JsonConverter's code.
func bigDecimalModel(s string) kv.Value {
	neg := strings.HasPrefix(s, "-")
	mant, expText, hasExp := strings.Cut(strings.ToLower(strings.TrimPrefix(s, "-")), "e")
	intp, frac, _ := strings.Cut(mant, ".")
	var exp big.Int
	if hasExp {
		exp.SetString(strings.TrimPrefix(expText, "+"), 10)
	}
	unscaled, _ := new(big.Int).SetString("0"+intp+frac, 10)
	if neg {
		unscaled.Neg(unscaled)
	}
	scale := int64(len(frac)) - exp.Int64()

	// stripTrailingZeros().scale()
	stripped, sscale := new(big.Int).Set(unscaled), scale
	ten, m := big.NewInt(10), new(big.Int)
	for stripped.Sign() != 0 {
		q, r := new(big.Int).QuoRem(stripped, ten, m)
		if r.Sign() != 0 {
			break
		}
		stripped, sscale = q, sscale-1
	}
	if stripped.Sign() == 0 {
		sscale = 0
	}
	simpleDouble := strings.Contains(s, ".") && !hasExp
	value := new(big.Rat).SetFrac(unscaled, new(big.Int).Exp(ten, big.NewInt(max(scale, 0)), nil))
	value.Mul(value, new(big.Rat).SetInt(new(big.Int).Exp(ten, big.NewInt(max(-scale, 0)), nil)))
	if sscale <= 0 && !simpleDouble {
		if n := value.Num(); n.IsInt64() {
			return kv.LongValue(n.Int64())
		}
		return kv.StringValue(plainModel(s, unscaled, scale))
	}
	if scale <= 16 {
		if f, _ := value.Float64(); !math.IsInf(f, 0) {
			return kv.DoubleValue(f + 0)
		}
	}
	return kv.StringValue(plainModel(s, unscaled, scale))
}

// plainModel is BigDecimal.toPlainString, or s past maxExpand.
func plainModel(s string, unscaled *big.Int, scale int64) string {
	if p := toPlainModel(unscaled, scale); len(p) <= len(s)+maxExpand {
		return p
	}
	return s
}

func toPlainModel(unscaled *big.Int, scale int64) string {
	digits := new(big.Int).Abs(unscaled).String()
	sign := ""
	if unscaled.Sign() < 0 {
		sign = "-"
	}
	switch {
	case scale == 0:
		return sign + digits
	case scale < 0:
		if unscaled.Sign() == 0 {
			return "0"
		}
		return sign + digits + strings.Repeat("0", int(-scale))
	}
	point := int64(len(digits)) - scale
	if point > 0 {
		return sign + digits[:point] + "." + digits[point:]
	}
	return sign + "0." + strings.Repeat("0", int(-point)) + digits
}

// FuzzDecoderFor: any Content-Type value picks a registered decoder exactly when
// its media type (before ';', trimmed, in any case) is registered, and is an
// *UnsupportedTypeError naming it otherwise; parameters never change the choice.
func FuzzDecoderFor(f *testing.F) {
	for _, s := range []string{"", "application/json", "Application/JSON; charset=utf-8", " text/plain ;x",
		"application/x-protobuf", "application/protobuf;proto=sluice.Telemetry", "application/xml", ";", "\x00",
		"application/x-www-form-urlencoded", strings.Repeat("A", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		d, err := DecoderFor([]byte(ct))
		mt, _, _ := strings.Cut(ct, ";")
		mt = strings.TrimSpace(mt)
		want, known := registry[asciiLower(mt)]
		var ute *UnsupportedTypeError
		switch {
		case known && (err != nil || d != want):
			t.Fatalf("%q: %v, %v; want the decoder of %q", ct, d, err, mt)
		case !known && (err == nil || !errors.As(err, &ute)):
			t.Fatalf("%q: %v, %v; want an *UnsupportedTypeError", ct, d, err)
		}
		if d2, err2 := DecoderFor([]byte(mt + "; q=1")); (err2 == nil) != (err == nil) || d2 != d {
			t.Fatalf("%q: a parameter changed the decoder", ct)
		}
	})
}

// asciiLower lowers A-Z only, as HTTP media types are matched.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
