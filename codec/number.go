package codec

import (
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/sluice-iot/sluice/kv"
)

// decimal is a number literal split the way java.math.BigDecimal sees it:
// unscaled digits intp+frac and scale = len(frac) - exp.
type decimal struct {
	text       string // the whole literal, ASCII
	neg        bool
	intp, frac string
	hasExp     bool
	scale      int64
	first      int // index of the first non-zero digit in intp+frac; -1 when the value is zero
	last       int // index of the last non-zero digit
}

func (d *decimal) digit(i int) byte {
	if i < len(d.intp) {
		return d.intp[i] - '0'
	}
	return d.frac[i-len(d.intp)] - '0'
}

func (d *decimal) ndigits() int { return len(d.intp) + len(d.frac) }

// parseDecimal splits s, which must match -?[0-9]*(\.[0-9]*)?([eE][+-]?[0-9]+)?
// (the JSON grammar and the NumberUtils.isParsable one both do). It fails like
// BigDecimal does when the exponent or the scale does not fit an int.
func parseDecimal(s string) (decimal, bool) {
	d := decimal{text: s, first: -1, last: -1}
	i := 0
	if i < len(s) && s[i] == '-' {
		d.neg = true
		i++
	}
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	d.intp = s[i:j]
	if j < len(s) && s[j] == '.' {
		k := j + 1
		for k < len(s) && s[k] >= '0' && s[k] <= '9' {
			k++
		}
		d.frac = s[j+1 : k]
		j = k
	}
	var exp int64
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		d.hasExp = true
		j++
		eneg := false
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			eneg = s[j] == '-'
			j++
		}
		for ; j < len(s); j++ {
			// Saturate: anything past 1e12 is out of BigDecimal's range anyway.
			if exp < 1e12 {
				exp = exp*10 + int64(s[j]-'0')
			}
		}
		if eneg {
			exp = -exp
		}
	}
	d.scale = int64(len(d.frac)) - exp
	if exp != int64(int32(exp)) || d.scale != int64(int32(d.scale)) {
		return d, false
	}
	n := d.ndigits()
	for k := 0; k < n; k++ {
		if d.digit(k) != 0 {
			d.first = k
			break
		}
	}
	for k := n - 1; k >= 0 && d.first >= 0; k-- {
		if d.digit(k) != 0 {
			d.last = k
			break
		}
	}
	return d, true
}

// integral reports whether stripTrailingZeros().scale() <= 0.
func (d *decimal) integral() bool {
	if d.first < 0 {
		return true
	}
	tz := int64(d.ndigits() - 1 - d.last)
	return d.scale-tz <= 0
}

// int64 is longValueExact for an integral d.
func (d *decimal) int64() (int64, bool) {
	if d.first < 0 {
		return 0, true
	}
	tz := int64(d.ndigits() - 1 - d.last)
	zeros := tz - d.scale
	if int64(d.last-d.first+1)+zeros > 19 {
		return 0, false
	}
	var u uint64
	for k := d.first; k <= d.last; k++ {
		u = u*10 + uint64(d.digit(k))
	}
	for ; zeros > 0; zeros-- {
		u *= 10
	}
	limit := uint64(math.MaxInt64)
	if d.neg {
		limit++
	}
	if u > limit {
		return 0, false
	}
	if d.neg {
		return -int64(u), true
	}
	return int64(u), true
}

// plain is BigDecimal.toPlainString: the unscaled digits (leading zeros gone,
// trailing ones kept) with the point placed by scale. It fails when the result
// would be longer than limit.
func (d *decimal) plain(limit int) (string, bool) {
	first := d.first
	if first < 0 {
		first = d.ndigits() - 1 // unscaled value 0 prints as "0"
	}
	n := int64(d.ndigits() - first)
	neg := int64(0)
	if d.neg && d.first >= 0 {
		neg = 1
	}
	var size int64
	switch {
	case d.scale == 0:
		size = neg + n
	case d.scale < 0 && d.first < 0:
		return "0", true
	case d.scale < 0:
		size = neg + n - d.scale
	case n > d.scale:
		size = neg + n + 1
	default:
		size = neg + 2 + d.scale
	}
	if size > int64(limit) {
		return "", false
	}
	b := make([]byte, 0, size)
	if neg == 1 {
		b = append(b, '-')
	}
	appendDigits := func(b []byte, from, to int) []byte {
		for k := from; k < to; k++ {
			b = append(b, '0'+d.digit(k))
		}
		return b
	}
	total := d.ndigits()
	if d.first < 0 {
		total = first + 1 // one zero
	}
	switch {
	case d.scale <= 0:
		b = appendDigits(b, first, total)
		for k := int64(0); k < -d.scale; k++ {
			b = append(b, '0')
		}
	case n > d.scale:
		point := first + int(n-d.scale)
		b = appendDigits(b, first, point)
		b = append(b, '.')
		b = appendDigits(b, point, total)
	default:
		b = append(b, "0."...)
		for k := int64(0); k < d.scale-n; k++ {
			b = append(b, '0')
		}
		b = appendDigits(b, first, total)
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), true
}

// maxExpand bounds how much longer than its literal a number's plain digits
// may be. BigDecimal would print 1e1000000 as a million digits: ten body bytes
// turned into a megabyte, per entry.
const maxExpand = 128

// typeNumber types a number literal into *v as ThingsBoard's JsonConverter
// does with type-cast on: LONG unless the text is a "simple double" (has '.',
// no exponent) or has a fraction; DOUBLE when scale <= 16; STRING (plain
// digits) when it fits neither. A plain form longer than maxLen, or more than
// maxExpand bytes longer than s, is replaced by s itself. ok is false when
// BigDecimal rejects s (exponent or scale beyond an int).
// Writing through v is deliberate: returning 48-byte values showed in profiles.
func typeNumber(v *kv.Value, s string, maxLen int) (ok bool) {
	if fastNumber(v, s) {
		return true
	}
	d, ok := parseDecimal(s)
	if !ok {
		return false
	}
	simpleDouble := !d.hasExp && strings.IndexByte(s, '.') >= 0
	if !simpleDouble && d.integral() {
		if n, ok := d.int64(); ok {
			*v = kv.LongValue(n)
			return true
		}
		d.stringValue(v, maxLen)
		return true
	}
	if d.scale <= 16 {
		f, err := strconv.ParseFloat(s, 64)
		if err == nil {
			if f == 0 {
				f = 0 // BigDecimal has no negative zero
			}
			*v = kv.DoubleValue(f)
			return true
		}
		// Only overflow gets here (±Inf). Java would store Infinity; we keep
		// the digits instead, as for a long that does not fit.
	}
	d.stringValue(v, maxLen)
	return true
}

var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// fastNumber types the common literals without BigDecimal arithmetic: up to
// 18 digits with no point (a Long), or up to 15 digits with a point and no
// exponent (a simple double with scale <= 15). There both the digits and the
// power of ten are exact doubles, so one division rounds correctly.
func fastNumber(v *kv.Value, s string) bool {
	i, neg := 0, false
	if len(s) > 0 && s[0] == '-' {
		i, neg = 1, true
	}
	var m uint64
	nd, dot := 0, -1
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			m = m*10 + uint64(c-'0')
			if nd++; nd > 18 {
				return false
			}
		case c == '.' && dot < 0:
			dot = i
		default:
			return false
		}
	}
	switch {
	case nd == 0:
		return false
	case dot < 0:
		n := int64(m)
		if neg {
			n = -n
		}
		*v = kv.LongValue(n)
		return true
	case nd > 15 || dot == len(s)-1:
		return false
	}
	f := float64(m) / pow10[len(s)-dot-1]
	if neg && f != 0 { // BigDecimal has no negative zero
		f = -f
	}
	*v = kv.DoubleValue(f)
	return true
}

func (d *decimal) stringValue(v *kv.Value, maxLen int) {
	s, ok := d.plain(min(maxLen, len(d.text)+maxExpand))
	if !ok {
		s = d.text
	}
	*v = kv.StringValue(s)
}

// parsable is commons-lang3 NumberUtils.isParsable (3.x up to 3.20): an optional
// '-', then BMP decimal digits of any script with at most one '.', not ending
// in '.'. ascii reports that every digit is 0-9.
func parsable(s string) (ok, ascii bool) {
	if len(s) == 0 || s[len(s)-1] == '.' {
		return false, false
	}
	i := 0
	if s[0] == '-' {
		if len(s) == 1 {
			return false, false
		}
		i = 1
	}
	dot := false
	ascii = true
	for i < len(s) {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			i++
		case c == '.':
			if dot {
				return false, false
			}
			dot = true
			i++
		case c < utf8.RuneSelf:
			return false, false
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			// Java tests UTF-16 chars: a supplementary digit is two surrogates, not digits.
			if r > 0xFFFF || !unicode.Is(unicode.Nd, r) {
				return false, false
			}
			ascii = false
			i += n
		}
	}
	return true, ascii
}

// asciiDigits rewrites the digits of a parsable s to 0-9, as BigDecimal reads
// them with Character.digit.
func asciiDigits(s string) string {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if r < utf8.RuneSelf {
			b = append(b, byte(r))
			continue
		}
		b = append(b, '0'+byte(digitValue(r)))
	}
	return string(b)
}

// digitValue relies on Unicode encoding every Nd digit in runs 0..9.
func digitValue(r rune) rune {
	z := r
	for unicode.Is(unicode.Nd, z-1) {
		z--
	}
	return (r - z) % 10
}

// typeString types a JSON string value into *v: numeric text becomes a number
// (type-cast, ThingsBoard's default), anything else stays a STRING.
func typeString(v *kv.Value, s string, maxLen int) {
	ok, ascii := parsable(s)
	if !ok {
		*v = kv.StringValue(s)
		return
	}
	t := s
	if !ascii {
		t = asciiDigits(s)
	}
	if !typeNumber(v, t, maxLen) {
		*v = kv.StringValue(s) // JsonConverter catches the failure and keeps the text
	}
}
