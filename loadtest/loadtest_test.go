package loadtest

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/codec"
	"github.com/sluice-iot/sluice/kv"
)

// server is an in-process fasthttp server on loopback that keeps what it was sent.
type server struct {
	addr  string
	calls atomic.Int64
	mu    sync.Mutex
	ts    map[int64]int // timestamps of every point received, and how often
	paths map[string]int
}

// startServer serves handler (nil: parse the telemetry body, answer 200, or 503 on
// the path /busy) until the test ends.
func startServer(t *testing.T, handler fasthttp.RequestHandler) *server {
	t.Helper()
	s := &server{ts: map[int64]int{}, paths: map[string]int{}}
	if handler == nil {
		handler = s.record
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { s.calls.Add(1); handler(ctx) }}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	s.addr = ln.Addr().String()
	return s
}

func (s *server) record(ctx *fasthttp.RequestCtx) {
	rows, err := codec.ParseTelemetry(nil, ctx.PostBody(), 1, codec.Limits{})
	if err != nil {
		ctx.Error(err.Error(), fasthttp.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paths[string(ctx.Path())]++
	seen := map[int64]bool{}
	for _, e := range rows {
		if !seen[e.Ts] {
			seen[e.Ts] = true
			s.ts[e.Ts]++
		}
	}
	if string(ctx.Path()) == "/busy" {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	}
}

func TestRunRequestCount(t *testing.T) {
	s := startServer(t, nil)
	const n, conns, rows = 200, 4, 3
	var observed atomic.Int64
	res, err := Run(Config{
		Addr: s.addr, Connections: conns, Requests: n,
		Generate: Telemetry([]string{"/api/v1/A/telemetry", "/api/v1/B/telemetry"}, rows, conns, 1_000_000),
		Observe: func(worker int, seq uint64, r *Request, status int, err error) {
			if status != 200 || err != nil || r.Points != rows*PointsPerRow {
				t.Errorf("observed worker %d seq %d: status %d, err %v, points %d", worker, seq, status, err, r.Points)
			}
			observed.Add(1)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != n || res.OK() != n || res.Status[200] != n || res.Errors != 0 || observed.Load() != n {
		t.Fatalf("result %v, observed %d", res, observed.Load())
	}
	if res.Points != n*rows*PointsPerRow || res.Latency.TotalCount() != n {
		t.Fatalf("points %d, latencies %d", res.Points, res.Latency.TotalCount())
	}
	if got := s.calls.Load(); got != n {
		t.Fatalf("server saw %d requests, want %d", got, n)
	}
	if a, b := s.paths["/api/v1/A/telemetry"], s.paths["/api/v1/B/telemetry"]; a == 0 || b == 0 || a+b != n {
		t.Fatalf("paths %v", s.paths)
	}
	// Every point of the run has its own timestamp, even for workers of one device.
	if len(s.ts) != n*rows {
		t.Fatalf("%d distinct timestamps, want %d", len(s.ts), n*rows)
	}
	for ts, c := range s.ts {
		if c != 1 {
			t.Fatalf("timestamp %d sent %d times", ts, c)
		}
	}
	if res.ReqPerSec() <= 0 || res.PointsPerSec() <= 0 || res.Quantile(50) > res.Max() {
		t.Fatalf("rates %f %f, p50 %v max %v", res.ReqPerSec(), res.PointsPerSec(), res.Quantile(50), res.Max())
	}
}

// TestRunStatus: answers are counted by status, and only 2xx answers count points.
func TestRunStatus(t *testing.T) {
	s := startServer(t, nil)
	res, err := Run(Config{
		Addr: s.addr, Connections: 2, Requests: 100,
		Generate: func(worker int, seq uint64, r *Request) {
			Telemetry([]string{"/ok"}, 1, 2, 0)(worker, seq, r)
			if seq%2 == 1 {
				r.Path = "/busy"
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status[200]+res.Status[503] != 100 || res.Status[503] == 0 || res.Status[200] == 0 {
		t.Fatalf("status %v", res.Status)
	}
	if res.Points != res.Status[200]*PointsPerRow {
		t.Fatalf("points %d for %d 200s", res.Points, res.Status[200])
	}
	if s.paths["/busy"] != int(res.Status[503]) {
		t.Fatalf("paths %v, status %v", s.paths, res.Status)
	}
}

// TestRunDuration: a run bounded by time alone ends, waits for requests in flight,
// and does not record the warm-up.
func TestRunDuration(t *testing.T) {
	s := startServer(t, func(ctx *fasthttp.RequestCtx) {})
	res, err := Run(Config{Addr: s.addr, Connections: 3, Duration: 50 * time.Millisecond, Warmup: 20 * time.Millisecond,
		Generate: Telemetry([]string{"/"}, 1, 3, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Errors != 0 || res.Elapsed < 50*time.Millisecond {
		t.Fatalf("result %v", res)
	}
	if got := s.calls.Load(); got < res.Requests {
		t.Fatalf("server saw %d requests, result has %d", got, res.Requests)
	}
}

// TestRunWarmupAndCount: with both a warm-up and a count, exactly the count is recorded.
func TestRunWarmupAndCount(t *testing.T) {
	s := startServer(t, func(ctx *fasthttp.RequestCtx) {})
	res, err := Run(Config{Addr: s.addr, Connections: 2, Requests: 10, Warmup: 10 * time.Millisecond,
		Generate: Telemetry([]string{"/"}, 1, 2, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 10 || s.calls.Load() < 10 {
		t.Fatalf("recorded %d, server saw %d", res.Requests, s.calls.Load())
	}
}

func TestRunGet(t *testing.T) {
	var methods sync.Map
	s := startServer(t, func(ctx *fasthttp.RequestCtx) { methods.Store(string(ctx.Method()), true) })
	res, err := Run(Config{Addr: s.addr, Requests: 3, Generate: func(_ int, _ uint64, r *Request) { r.Path = "/x" }})
	if err != nil || res.Status[200] != 3 {
		t.Fatalf("result %v, %v", res, err)
	}
	if _, ok := methods.Load("GET"); !ok {
		t.Fatal("a request without a body was not a GET")
	}
}

// TestRunConnectionErrors: a target that refuses connections gives errors, not answers.
func TestRunConnectionErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	res, err := Run(Config{Addr: addr, Connections: 2, Requests: 5, Timeout: time.Second, Generate: Telemetry([]string{"/"}, 1, 2, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 5 || res.Requests != 0 || res.Points != 0 || res.FirstErr == nil {
		t.Fatalf("result %v, first error %v", res, res.FirstErr)
	}
}

func TestConfigErrors(t *testing.T) {
	gen := Telemetry([]string{"/"}, 1, 1, 0)
	f := func(cfg Config, want string) {
		t.Helper()
		_, err := Run(cfg)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want %q", err, want)
		}
	}
	f(Config{Generate: gen, Requests: 1}, "Addr is empty")
	f(Config{Addr: "127.0.0.1:1", Requests: 1}, "Generate is nil")
	f(Config{Addr: "127.0.0.1:1", Generate: gen}, "neither Duration nor Requests")
	f(Config{Addr: "127.0.0.1:1", Generate: gen, Requests: 1, Connections: -1}, "negative")
	f(Config{Addr: "127.0.0.1:1", Generate: gen, Duration: time.Second, Requests: -1}, "negative")
	f(Config{Addr: "127.0.0.1:1", Generate: gen, Duration: time.Second, Rate: 1e300}, "above the most")
	f(Config{Addr: "127.0.0.1:1", Generate: gen, Duration: time.Second, Rate: MaxRate + 1}, "above the most")
}

// TestAppendTelemetry: both shapes are the ThingsBoard forms the codec reads, with
// PointsPerRow values per row at consecutive timestamps.
func TestAppendTelemetry(t *testing.T) {
	f := func(rows int, wantPrefix byte) {
		t.Helper()
		body := AppendTelemetry([]byte("junk"), 5000, rows)[4:]
		if body[0] != wantPrefix {
			t.Fatalf("%d rows: body starts %q", rows, body[0])
		}
		got, err := codec.ParseTelemetryStrict(nil, body, 1, codec.Limits{})
		if err != nil {
			t.Fatalf("%d rows: %v\n%s", rows, err, body)
		}
		if len(got) != rows*PointsPerRow {
			t.Fatalf("%d rows: %d points", rows, len(got))
		}
		for i, e := range got {
			if want := int64(5000 + i/PointsPerRow); e.Ts != want {
				t.Fatalf("%d rows: point %d (%s) at %d, want %d", rows, i, e.Key, e.Ts, want)
			}
		}
		if got[2].Value.Type != kv.Bool || got[3].Value.Type != kv.String {
			t.Fatalf("%d rows: types %v", rows, got[:PointsPerRow])
		}
	}
	f(1, '{')
	f(2, '[')
	f(100, '[')
}

// TestRunEncoding: with an Encoding every body goes compressed, named in
// Content-Encoding, and decompresses to what the Generator made; a repeated body
// reuses its compressed bytes.
func TestRunEncoding(t *testing.T) {
	for _, enc := range []string{EncodingGzip, EncodingZstd} {
		var mu sync.Mutex
		bodies := map[string]int{}
		s := startServer(t, func(ctx *fasthttp.RequestCtx) {
			if got := string(ctx.Request.Header.ContentEncoding()); got != enc {
				ctx.Error("Content-Encoding "+got, fasthttp.StatusUnsupportedMediaType)
				return
			}
			var b []byte
			var err error
			if enc == EncodingGzip {
				b, err = ctx.Request.BodyGunzip()
			} else {
				var d *zstd.Decoder
				if d, err = zstd.NewReader(nil); err == nil {
					b, err = d.DecodeAll(ctx.PostBody(), nil)
					d.Close()
				}
			}
			if err != nil {
				ctx.Error(err.Error(), fasthttp.StatusBadRequest)
				return
			}
			mu.Lock()
			bodies[string(b)]++
			mu.Unlock()
		})
		res, err := Run(Config{Addr: s.addr, Connections: 2, Requests: 20, Encoding: enc,
			Generate: func(w int, seq uint64, r *Request) {
				r.Path = "/"
				r.Body = fmt.Appendf(r.Body, `{"n":%d}`, seq%3)
			}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status[200] != 20 || len(bodies) != 3 || bodies[`{"n":0}`] == 0 {
			t.Fatalf("%s: result %v, bodies %v", enc, res, bodies)
		}
	}
	if _, err := Run(Config{Addr: "x:1", Requests: 1, Encoding: "br", Generate: Telemetry([]string{"/"}, 1, 1, 0)}); err == nil ||
		!strings.Contains(err.Error(), "unknown encoding") {
		t.Fatalf("encoding br: %v", err)
	}
}

func TestEncoderReuse(t *testing.T) {
	for _, enc := range []string{EncodingGzip, EncodingZstd} {
		e := newEncoder(enc)
		a := e.compress([]byte(`{"a":1}`))
		b := e.compress([]byte(`{"a":1}`))
		if &a[0] != &b[0] {
			t.Fatalf("%s: an equal body was compressed again", enc)
		}
		c := e.compress([]byte(`{"a":2}`))
		if len(c) == 0 {
			t.Fatalf("%s: empty", enc)
		}
		allocs := testing.AllocsPerRun(100, func() { e.compress([]byte(`{"temperature":21.5}`)); e.compress([]byte(`{"temperature":21.6}`)) })
		if allocs > 2 {
			t.Fatalf("%s: %.0f allocations per two bodies", enc, allocs)
		}
	}
}
