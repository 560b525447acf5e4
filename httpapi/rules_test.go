package httpapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-iot/sluice/codec"
)

func TestParseClientRPC(t *testing.T) {
	f := func(body, wantMethod, wantParams, wantErr string) {
		t.Helper()
		method, params, err := parseClientRPC([]byte(body), codec.Limits{MaxDepth: 4, MaxObjectKeys: 3})
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Fatalf("parseClientRPC(%s) error = %v, want %q", body, err, wantErr)
			}
			return
		}
		if err != nil || method != wantMethod || string(params) != wantParams {
			t.Fatalf("parseClientRPC(%s) = %q, %s, %v; want %q, %s", body, method, params, err, wantMethod, wantParams)
		}
	}
	f(`{"method":"getTime","params":{}}`, "getTime", `{}`, "")
	f(`{"method":"getTime"}`, "getTime", ``, "")
	f(`{"method":"getTime","params":null}`, "getTime", ``, "")
	f(`{"params":[1,"a",{"b":true}],"method":"m","extra":1}`, "m", `[1,"a",{"b":true}]`, "")
	f(`{"method":"m","params":"text"}`, "m", `"text"`, "")
	f(`{"method":"m","params":42.5}`, "m", `42.5`, "")
	f(`{"method":"\u00e9t\"at"}`, "ét\"at", ``, "")
	f(`{"method":"m","params":{"a":{"b":[1]}}}`, "m", `{"a":{"b":[1]}}`, "")
	f(`{"method":"m","params":{"a":{"b":[{}]}}}`, "", "", "nesting depth exceeds 4")
	f(`{"method":"m","params":{"a":1,"b":2,"c":3,"d":4}}`, "", "", "object has more than 3 keys")
	f(`{"method":"m","params":"[[[[[[["}`, "m", `"[[[[[[["`, "")
	f(``, "", "", "must be a JSON object")
	f(`null`, "", "", "must be a JSON object")
	f(`[]`, "", "", "must be a JSON object")
	f(`{"method":"m"`, "", "", "must be a JSON object")
	f(`{"params":{}}`, "", "", "method must be a non-empty string")
	f(`{"method":""}`, "", "", "method must be a non-empty string")
	f(`{"method":7}`, "", "", "method must be a non-empty string")
	f(`{"method":null}`, "", "", "method must be a non-empty string")
	// Strict UTF-8, as on every other route.
	f("{\"method\":\"x\",\"params\":\"\xc0\xaf\"}", "", "", "must be a JSON object")
	f("{\"\xff\":1,\"method\":\"x\"}", "", "", "must be a JSON object")
}

func FuzzParseClientRPC(f *testing.F) {
	for _, s := range []string{`{"method":"getTime","params":{}}`, `{"method":"m"}`, `{"method":"m","params":[1,{"a":"\""}]}`, `{}`, `[`, `{"method":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 4096 {
			return // longer bodies only repeat what short ones reach, slowly
		}
		method, params, err := parseClientRPC(body, codec.Limits{})
		if err != nil {
			return
		}
		if method == "" {
			t.Fatalf("empty method accepted from %q", body)
		}
		if params != nil && !json.Valid(params) {
			t.Fatalf("params %q of %q are not JSON", params, body)
		}
	})
}
