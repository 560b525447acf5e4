package codec

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-iot/sluice/kv"
)

// singleBody is one device point; batchBody 100 timestamped packs, as a
// gateway or a buffering device sends them.
var (
	singleBody = []byte(`{"temperature":26.5,"humidity":87,"active":true,"status":"ok","fw":"1.2.3","rssi":"-71"}`)
	batchBody  = func() []byte {
		var b strings.Builder
		b.WriteByte('[')
		for i := range 100 {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"ts":%d,"values":{"temperature":%d.%d,"humidity":%d,"active":true,"status":"ok"}}`,
				1634712287000+int64(i)*1000, 20+i%10, i%10, 40+i%50)
		}
		b.WriteByte(']')
		return []byte(b.String())
	}()
)

func benchParse(b *testing.B, body []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	dst := make([]kv.Entry, 0, 1024)
	var err error
	for b.Loop() {
		if dst, err = ParseTelemetry(dst[:0], body, now, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func benchStdlib(b *testing.B, body []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var v any // map[string]any or []any
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseTelemetrySingle(b *testing.B)   { benchParse(b, singleBody) }
func BenchmarkParseTelemetryBatch100(b *testing.B) { benchParse(b, batchBody) }
func BenchmarkStdlibSingle(b *testing.B)           { benchStdlib(b, singleBody) }
func BenchmarkStdlibBatch100(b *testing.B)         { benchStdlib(b, batchBody) }

// BenchmarkLongRuns parses the longRuns shapes at 1 KiB and 1 MiB: the same
// throughput at both sizes is the parser being linear.
func BenchmarkLongRuns(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 20} {
		for _, c := range longRuns(n) {
			body := []byte(c.body)
			b.Run(fmt.Sprintf("%s/%d", c.name, n), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					ParseTelemetry(nil, body, now, Limits{})
				}
			})
		}
	}
}
