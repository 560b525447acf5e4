package codec

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/sluice-iot/sluice/kv"
)

// start checks that the body holds an object or array, and otherwise says
// that it must be what.
func (p *parser) start(what string) error {
	p.skipWS()
	c := p.peek()
	switch {
	case p.pos >= len(p.b):
		return p.errorf("empty body")
	case c == '{' || c == '[':
		return nil
	case isValueStart(c) && p.literalAhead(c):
		return p.errorf("%s, got %s", what, kindOf(c))
	}
	return p.syntax(p.pos, "")
}

// literalAhead is whether the value starting with c at p.pos is true, false
// or null when c says it should be one, so that "nope{" is a syntax error
// rather than "got null".
func (p *parser) literalAhead(c byte) bool {
	var lit string
	switch c {
	case 't':
		lit = "true"
	case 'f':
		lit = "false"
	case 'n':
		lit = "null"
	}
	return bytes.HasPrefix(p.b[p.pos:], []byte(lit))
}

func (p *parser) attributes() error {
	if err := p.start("attributes must be a JSON object"); err != nil {
		return err
	}
	if p.peek() != '{' {
		return p.errorf("attributes must be a JSON object, got array")
	}
	_, _, err := p.kvObject(0, 1)
	return err
}

func (p *parser) telemetry(now int64) error {
	if err := p.start("telemetry must be a JSON object or an array of objects"); err != nil {
		return err
	}
	if p.peek() == '{' {
		return p.pack(now, 1)
	}
	p.pos++ // '['
	p.skipWS()
	if p.peek() == ']' {
		p.pos++
		return nil
	}
	for i := 0; ; i++ {
		switch c := p.peek(); {
		case c == '{':
		case c == '[' || isValueStart(c):
			return p.errorf("telemetry array element %d must be a JSON object, got %s", i, kindOf(c))
		default:
			return p.syntax(p.pos, "")
		}
		if err := p.pack(now, 2); err != nil {
			return err
		}
		p.skipWS()
		switch p.peek() {
		case ',':
			p.pos++
			p.skipWS()
		case ']':
			p.pos++
			return nil
		default:
			return p.syntax(p.pos, "")
		}
	}
}

func kindOf(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// pack parses one telemetry object: {"ts":T,"values":{...}} when it has both
// keys, else plain key/values at now. The common layouts cost one pass: an
// object whose first key is "ts" or "values" is read as a pack, any other as
// plain, and only a guess proved wrong is read again.
func (p *parser) pack(now int64, depth int) error {
	start, mark := p.pos, len(p.dst)
	if k := p.firstKey(); k == "ts" || k == "values" {
		ok, err := p.tsPack(depth)
		if err != nil || ok {
			return err
		}
		p.pos, p.dst = start, p.dst[:mark]
		_, _, err = p.kvObject(now, depth)
		return err
	}
	sawTs, sawValues, perr := p.kvObject(now, depth)
	if perr == nil && (!sawTs || !sawValues) {
		return nil
	}
	// A pack after all, or an error (blank key, null) that a pack would not
	// raise because it ignores its other keys: read it again as a pack.
	p.pos, p.dst = start, p.dst[:mark]
	ok, err := p.tsPack(depth)
	if perr != nil && (err != nil || !ok) {
		return perr
	}
	return err
}

// firstKey returns the first key of the object at p.pos, or "" if there is
// none or it is malformed (the real pass reports that); p.pos is unchanged.
func (p *parser) firstKey() string {
	start := p.pos
	defer func() { p.pos = start }()
	p.pos++
	p.skipWS()
	if p.peek() != '"' {
		return ""
	}
	k, _ := p.readString()
	return k
}

// tsPack parses the object at p.pos as {"ts":T,"values":{...}}; ok is false
// when it lacks one of the two keys and so is plain key/values. Other keys are
// validated and ignored. For duplicates the last "ts" and "values" win.
func (p *parser) tsPack(depth int) (ok bool, err error) {
	if err := p.objectStart(depth); err != nil {
		return false, err
	}
	var (
		ts        int64
		hasTs     bool
		tsOK      bool
		hasValues bool
		valuesPos = -1 // a "values" not parsed yet
		mark      = len(p.dst)
	)
	for n := 1; p.peek() != '}'; n++ {
		key, err := p.objectKey(n)
		if err != nil {
			return false, err
		}
		switch key {
		case "ts":
			hasTs = true
			if ts, tsOK, err = p.tsValue(depth + 1); err != nil {
				return false, err
			}
		case "values":
			hasValues = true
			p.dst = p.dst[:mark]
			valuesPos = -1
			if hasTs && p.peek() == '{' {
				// Both keys seen: this is a pack, parse in place.
				if _, _, err := p.kvObject(0, depth+1); err != nil {
					return false, err
				}
				break
			}
			valuesPos = p.pos
			if _, err := p.skip(depth + 1); err != nil {
				return false, err
			}
		default:
			if _, err := p.skip(depth + 1); err != nil {
				return false, err
			}
		}
		if err := p.objectNext(); err != nil {
			return false, err
		}
	}
	p.pos++ // '}'
	if !hasTs || !hasValues {
		return false, nil
	}
	if !tsOK {
		return false, p.errorf(`"ts" must be an integer number of milliseconds`)
	}
	if valuesPos >= 0 {
		end := p.pos
		p.pos = valuesPos
		if c := p.peek(); c != '{' {
			return false, p.errorf(`"values" must be a JSON object, got %s`, kindOf(c))
		}
		if _, _, err := p.kvObject(0, depth+1); err != nil {
			return false, err
		}
		p.pos = end
	}
	for i := mark; i < len(p.dst); i++ {
		p.dst[i].Ts = ts
	}
	return true, nil
}

// tsValue reads a "ts" value: an integral JSON number, or a string holding a
// decimal integer (Gson's getAsLong takes both). ok is false for anything else.
func (p *parser) tsValue(depth int) (ts int64, ok bool, err error) {
	switch c := p.peek(); {
	case c == '-' || c >= '0' && c <= '9':
		s, err := p.number()
		if err != nil {
			return 0, false, err
		}
		var v kv.Value
		if fastNumber(&v, s) && v.Type == kv.Long {
			return v.Long, true, nil
		}
		d, ok := parseDecimal(s)
		if !ok || !d.integral() {
			return 0, false, nil
		}
		ts, ok = d.int64()
		return ts, ok, nil
	case c == '"':
		s, err := p.readString()
		if err != nil {
			return 0, false, err
		}
		ts, perr := strconv.ParseInt(s, 10, 64)
		return ts, perr == nil, nil
	}
	_, err = p.skip(depth)
	return 0, false, err
}

// objectStart consumes '{' of an object at depth and the whitespace after it.
func (p *parser) objectStart(depth int) error {
	if err := p.enter(depth); err != nil {
		return err
	}
	p.pos++
	p.skipWS()
	if c := p.peek(); c != '"' && c != '}' {
		return p.syntax(p.pos, "")
	}
	return nil
}

// objectKey reads the n-th `"key":` of an object, leaving p.pos at the value.
func (p *parser) objectKey(n int) (string, error) {
	if n > p.lim.MaxObjectKeys {
		return "", p.limitf("object has more than %d keys", p.lim.MaxObjectKeys)
	}
	if p.peek() != '"' {
		return "", p.syntax(p.pos, "")
	}
	key, err := p.readString()
	if err != nil {
		return "", err
	}
	p.skipWS()
	if p.peek() != ':' {
		return "", p.syntax(p.pos, "")
	}
	p.pos++
	p.skipWS()
	return key, nil
}

// objectNext consumes the ',' after a member, or stops before '}'.
func (p *parser) objectNext() error {
	p.skipWS()
	switch p.peek() {
	case ',':
		p.pos++
		p.skipWS()
		if p.peek() != '"' {
			return p.syntax(p.pos, "")
		}
	case '}':
	default:
		return p.syntax(p.pos, "")
	}
	return nil
}

// kvObject appends one entry per member of the object at p.pos, at ts. It
// reports whether keys "ts" and "values" occurred, for pack.
func (p *parser) kvObject(ts int64, depth int) (sawTs, sawValues bool, err error) {
	if err := p.objectStart(depth); err != nil {
		return false, false, err
	}
	for n := 1; p.peek() != '}'; n++ {
		key, err := p.objectKey(n)
		if err != nil {
			return false, false, err
		}
		if len(key) > p.lim.MaxKeyLen {
			return false, false, p.limitf("key length exceeds %d bytes", p.lim.MaxKeyLen)
		}
		if blank(key) {
			return false, false, p.errorf("Key cannot be blank")
		}
		switch key {
		case "ts":
			sawTs = true
		case "values":
			sawValues = true
		}
		if err := p.kvValue(key, ts, depth+1); err != nil {
			return false, false, err
		}
		if err := p.objectNext(); err != nil {
			return false, false, err
		}
	}
	p.pos++ // '}'
	return sawTs, sawValues, nil
}

// kvValue types the value at p.pos and appends it as an entry. The entry is
// filled in place: copying 64-byte entries showed up in profiles.
func (p *parser) kvValue(key string, ts int64, depth int) error {
	if p.peek() == 'n' {
		if err := p.literal("null"); err != nil {
			return err
		}
		if p.strict {
			return p.errorf("Can't parse value: null")
		}
		return nil
	}
	n := len(p.dst)
	if n-p.base >= p.lim.MaxEntries {
		return p.limitf("entries exceed %d", p.lim.MaxEntries)
	}
	if n == cap(p.dst) {
		p.dst = slices.Grow(p.dst, 1)
	}
	p.dst = p.dst[:n+1]
	en := &p.dst[n]
	en.Ts, en.Key = ts, key
	if err := p.value(&en.Value, key, depth); err != nil {
		p.dst = p.dst[:n]
		return err
	}
	return nil
}

// value types the non-null value at p.pos into v.
func (p *parser) value(v *kv.Value, key string, depth int) error {
	switch c := p.peek(); {
	case c == '"':
		s, err := p.readString()
		if err != nil {
			return err
		}
		if len(s) > p.lim.MaxValueLen {
			return p.tooLong(key)
		}
		typeString(v, s, p.lim.MaxValueLen)
	case c == 't':
		*v = kv.BoolValue(true)
		return p.literal("true")
	case c == 'f':
		*v = kv.BoolValue(false)
		return p.literal("false")
	case c == '{' || c == '[':
		start := p.pos
		ws, err := p.skip(depth)
		if err != nil {
			return err
		}
		raw := p.b[start:p.pos]
		if len(raw)-ws > p.lim.MaxValueLen {
			return p.tooLong(key)
		}
		if ws == 0 {
			*v = kv.JSONValue(p.alias(start, p.pos))
		} else {
			*v = kv.JSONValue(p.arena.commit(compact(p.arena.reserve(len(raw)-ws), raw)))
		}
	default:
		s, err := p.number()
		if err != nil {
			return err
		}
		if len(s) > p.lim.MaxValueLen {
			return p.tooLong(key)
		}
		if !typeNumber(v, s, p.lim.MaxValueLen) {
			return p.errorf("Can't parse value: %s (number out of range)", s)
		}
	}
	return nil
}

func (p *parser) tooLong(key string) error {
	return p.limitf("value of key %q: value length exceeds %d bytes", key, p.lim.MaxValueLen)
}

// blank is Java's String.isBlank: empty or only Character.isWhitespace chars.
func blank(s string) bool {
	for _, r := range s {
		if !javaSpace(r) {
			return false
		}
	}
	return true
}

// javaSpace is Character.isWhitespace: Unicode space separators except the
// no-break ones, plus the ASCII controls \t \n \v \f \r and 0x1C-0x1F.
func javaSpace(r rune) bool {
	switch {
	case r >= '\t' && r <= '\r', r >= 0x1C && r <= ' ':
		return true
	case r < 0x80:
		return false
	case r == 0xA0, r == 0x2007, r == 0x202F:
		return false
	}
	return r == 0x1680 || r >= 0x2000 && r <= 0x200A || r == 0x2028 || r == 0x2029 || r == 0x205F || r == 0x3000
}
