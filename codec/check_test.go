package codec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckJSON(t *testing.T) {
	lim := Limits{MaxDepth: 3, MaxObjectKeys: 2}
	for _, c := range []struct {
		body, err string
	}{
		{`{"method":"m","params":{"a":[1,2,{"b":null}]}}`, "nesting depth exceeds 3"},
		{`{"method":"m","params":{"a":[1,2]}}`, ""},
		{` [1, "x", true, false, null, -1.5e3] `, ""},
		{`{"a":1,"b":2,"c":3}`, "object has more than 2 keys"},
		{`{"a":{"x":1,"y":2,"z":3}}`, "object has more than 2 keys"},
		{`"s"`, ""},
		{``, "empty body"},
		{`  `, "empty body"},
		{`{"a":1} {}`, "invalid JSON at offset 8"},
		{`{"a":}`, "invalid JSON"},
		{"\"\x01\"", "invalid JSON"},
		{`[[[[1]]]]`, "nesting depth exceeds 3"},
	} {
		err := CheckJSON([]byte(c.body), lim)
		var ce *Error
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.body, err)
		case c.err != "" && (!errors.As(err, &ce) || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v, want %q", c.body, err, c.err)
		case c.err != "" && ce.Limit != (strings.Contains(c.err, "exceeds") || strings.Contains(c.err, "more than")):
			t.Errorf("%q: %v: Limit %v", c.body, err, ce.Limit)
		}
	}
	// Defaults: 32 levels and 1000 keys.
	if err := CheckJSON([]byte(strings.Repeat("[", 33)+strings.Repeat("]", 33)), Limits{}); err == nil {
		t.Error("33 levels passed the default limit")
	}
}

// FuzzCheckJSON: what CheckJSON accepts is valid JSON, and with limits out of
// reach it accepts all valid JSON in valid UTF-8.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":"\u00e9"}]}`, `[]`, `1`, `"\ud800"`, `{"a":1,}`, ` null `, `[1 2]`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	wide := Limits{MaxDepth: 1 << 20, MaxObjectKeys: 1 << 20}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := CheckJSON(body, fuzzLimits)
		if err == nil && !json.Valid(body) {
			t.Fatalf("%q passed but is not JSON", body)
		}
		if werr := CheckJSON(body, wide); (werr == nil) != (utf8.Valid(body) && json.Valid(body)) {
			t.Fatalf("%q: %v, but encoding/json says valid %v", body, werr, json.Valid(body))
		}
	})
}
