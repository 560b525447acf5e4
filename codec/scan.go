package codec

import (
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/sluice-iot/sluice/kv"
)

// parser is a single-pass scanner over one request body, in the manner of
// nats-server's server/parser.go: a position, a byte switch, no tokens.
type parser struct {
	b      []byte
	pos    int
	lim    Limits
	strict bool
	dst    []kv.Entry
	base   int // len(dst) on entry, for MaxEntries
	arena  arena
}

// special marks the bytes that stop the fast string loop.
var special = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	for c := utf8.RuneSelf; c < 256; c++ {
		t[c] = true
	}
	return t
}()

func (p *parser) errorf(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

// limitf is errorf for a body past one of the Limits.
func (p *parser) limitf(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...), Limit: true}
}

// syntax reports invalid JSON at offset i.
func (p *parser) syntax(i int, what string) error {
	if i >= len(p.b) {
		return p.errorf("invalid JSON: unexpected end of input")
	}
	if what == "" {
		what = fmt.Sprintf("unexpected character %q", p.b[i])
	}
	return p.errorf("invalid JSON at offset %d: %s", i, what)
}

func (p *parser) peek() byte {
	if p.pos < len(p.b) {
		return p.b[p.pos]
	}
	return 0
}

func (p *parser) skipWS() {
	for p.pos < len(p.b) {
		switch p.b[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// skipWSCount is skipWS that also reports how many bytes it skipped.
func (p *parser) skipWSCount() int {
	start := p.pos
	p.skipWS()
	return p.pos - start
}

func (p *parser) alias(start, end int) string {
	if end <= start {
		return ""
	}
	return unsafe.String(&p.b[start], end-start)
}

// scanString validates the string whose opening quote is at p.pos and returns
// the offset of its closing quote and whether it holds escapes.
func (p *parser) scanString() (end int, esc bool, err error) {
	b := p.b
	i := p.pos + 1
	for {
		for i < len(b) && !special[b[i]] {
			i++
		}
		if i >= len(b) {
			return 0, false, p.syntax(i, "")
		}
		switch c := b[i]; {
		case c == '"':
			return i, esc, nil
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return 0, false, p.syntax(i+1, "")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex4(b[i+2:i+6]) {
					return 0, false, p.syntax(i, "invalid \\u escape")
				}
				i += 6
			default:
				return 0, false, p.syntax(i, "invalid escape")
			}
		case c < 0x20:
			return 0, false, p.syntax(i, "control character in string")
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return 0, false, p.syntax(i, "invalid UTF-8")
			}
			i += n
		}
	}
}

func isHex4(h []byte) bool {
	for _, c := range h {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// readString reads the string at p.pos. Text without escapes aliases the body;
// escaped text is decoded into the arena.
func (p *parser) readString() (string, error) {
	end, esc, err := p.scanString()
	if err != nil {
		return "", err
	}
	start := p.pos + 1
	p.pos = end + 1
	if !esc {
		return p.alias(start, end), nil
	}
	return p.arena.commit(unescape(p.arena.reserve(end-start), p.b[start:end])), nil
}

// unescape appends the decoded form of src, a string body that scanString
// accepted, to dst. Lone surrogates become U+FFFD, as in encoding/json.
func unescape(dst, src []byte) []byte {
	for i := 0; i < len(src); {
		c := src[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		switch e := src[i+1]; e {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(src[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(r) {
				r2 := rune(utf8.RuneError)
				if i+6 <= len(src) && src[i] == '\\' && src[i+1] == 'u' {
					r2 = hex4(src[i+2 : i+6])
				}
				if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
					r = pair
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, e)
		}
		i += 2
	}
	return dst
}

// literal consumes word (true, false, null) at p.pos.
func (p *parser) literal(word string) error {
	if len(p.b)-p.pos < len(word) || string(p.b[p.pos:p.pos+len(word)]) != word {
		i := p.pos
		for i < len(p.b) && i-p.pos < len(word) && p.b[i] == word[i-p.pos] {
			i++
		}
		return p.syntax(i, "")
	}
	p.pos += len(word)
	return nil
}

// number scans a JSON number at p.pos and returns its text.
func (p *parser) number() (string, error) {
	b, i := p.b, p.pos
	digits := func() int {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i - j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return "", p.syntax(i, "")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return "", p.syntax(i, "")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return "", p.syntax(i, "")
		}
	}
	s := p.alias(p.pos, i)
	p.pos = i
	return s, nil
}

// isValueStart reports whether c can begin a JSON scalar, so a shape error
// can be told from a syntax error.
func isValueStart(c byte) bool {
	return c == '"' || c == 't' || c == 'f' || c == 'n' || c == '-' || c >= '0' && c <= '9'
}

// enter checks the nesting limit for a container opened at depth.
func (p *parser) enter(depth int) error {
	if depth > p.lim.MaxDepth {
		return p.limitf("nesting depth exceeds %d", p.lim.MaxDepth)
	}
	return nil
}

// skip validates the value at p.pos, which sits at nesting depth depth when
// it is a container, and moves past it. It returns how many bytes of
// insignificant whitespace the value holds.
func (p *parser) skip(depth int) (ws int, err error) {
	switch c := p.peek(); {
	case c == '{' || c == '[':
		if err := p.enter(depth); err != nil {
			return 0, err
		}
		closer := byte(']')
		if c == '{' {
			closer = '}'
		}
		p.pos++
		ws += p.skipWSCount()
		if p.peek() == closer {
			p.pos++
			return ws, nil
		}
		for n := 1; ; n++ {
			if c == '{' {
				if n > p.lim.MaxObjectKeys {
					return 0, p.limitf("object has more than %d keys", p.lim.MaxObjectKeys)
				}
				if p.peek() != '"' {
					return 0, p.syntax(p.pos, "")
				}
				end, _, err := p.scanString()
				if err != nil {
					return 0, err
				}
				p.pos = end + 1
				ws += p.skipWSCount()
				if p.peek() != ':' {
					return 0, p.syntax(p.pos, "")
				}
				p.pos++
				ws += p.skipWSCount()
			}
			w, err := p.skip(depth + 1)
			if err != nil {
				return 0, err
			}
			ws += w + p.skipWSCount()
			switch p.peek() {
			case ',':
				p.pos++
				ws += p.skipWSCount()
			case closer:
				p.pos++
				return ws, nil
			default:
				return 0, p.syntax(p.pos, "")
			}
		}
	case c == '"':
		end, _, err := p.scanString()
		if err != nil {
			return 0, err
		}
		p.pos = end + 1
	case c == 't':
		return 0, p.literal("true")
	case c == 'f':
		return 0, p.literal("false")
	case c == 'n':
		return 0, p.literal("null")
	default:
		_, err := p.number()
		return 0, err
	}
	return 0, nil
}

// compact appends src, valid JSON, without insignificant whitespace.
func compact(dst, src []byte) []byte {
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case ' ', '\t', '\n', '\r':
		case '"':
			j := i + 1
			for src[j] != '"' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			dst = append(dst, src[i:j+1]...)
			i = j
		default:
			dst = append(dst, c)
		}
	}
	return dst
}
