package bench

import (
	"encoding/json"
	"testing"

	"github.com/valyala/fastjson"

	"github.com/sluice-iot/sluice/codec"
	"github.com/sluice-iot/sluice/kv"
	"github.com/sluice-iot/sluice/loadtest"
)

// The codec against encoding/json and fastjson on the harness's payloads. The codec
// does the most work: it validates, types every value as ThingsBoard does and
// returns []kv.Entry; encoding/json builds map[string]any, and fastjson builds its
// own tree of untyped values, which a server would still have to walk.
func BenchmarkDecode(b *testing.B) {
	for _, p := range Payloads {
		body := loadtest.AppendTelemetry(nil, 1_700_000_000_000, p.Rows)
		b.Run(p.Name+"/codec", func(b *testing.B) {
			start(b, body)
			dst := make([]kv.Entry, 0, p.Rows*loadtest.PointsPerRow)
			var err error
			for b.Loop() {
				if dst, err = codec.ParseTelemetry(dst[:0], body, 1, codec.Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(p.Name+"/encoding-json", func(b *testing.B) {
			start(b, body)
			for b.Loop() {
				var v any
				if err := json.Unmarshal(body, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(p.Name+"/fastjson", func(b *testing.B) {
			start(b, body)
			var parser fastjson.Parser
			for b.Loop() {
				if _, err := parser.ParseBytes(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func start(b *testing.B, body []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
}

// TestDecodeAgree: the three decoders read the same payloads, and the codec finds
// every point in them.
func TestDecodeAgree(t *testing.T) {
	for _, p := range Payloads {
		body := loadtest.AppendTelemetry(nil, 1_700_000_000_000, p.Rows)
		got, err := codec.ParseTelemetry(nil, body, 1, codec.Limits{})
		if err != nil || len(got) != p.Rows*loadtest.PointsPerRow {
			t.Fatalf("%s: codec: %d points, %v", p.Name, len(got), err)
		}
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("%s: encoding/json: %v", p.Name, err)
		}
		if _, err := fastjson.ParseBytes(body); err != nil {
			t.Fatalf("%s: fastjson: %v", p.Name, err)
		}
	}
}
