package httpapi

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/codec"
)

// Request bodies of the telemetry and attribute writes may be compressed
// (Content-Encoding gzip or zstd) and JSON or any other type codec has a
// decoder for (Content-Type). A compressed body is inflated as a stream into a
// pooled buffer that stops one byte past MaxBodySize, so a zip bomb costs at
// most about the limit in memory, as a plain body does. Every other JSON body
// may be compressed too (withBody), within its route's limit.

// decodeTelemetry decodes the telemetry body of ctx into b.entries. On failure
// it has answered the request (400, 413 or 415) and returns false.
func (s *Server) decodeTelemetry(ctx *fasthttp.RequestCtx, b *batch, strict bool) bool {
	body, dec, ok := s.requestBody(ctx, b, strict)
	if !ok {
		return false
	}
	var err error
	b.entries, err = dec.Telemetry(b.entries, body, time.Now().UnixMilli(), s.cfg.Limits, strict)
	if err != nil {
		s.fail(ctx, err)
		return false
	}
	return true
}

// decodeAttributes is decodeTelemetry for an attributes body.
func (s *Server) decodeAttributes(ctx *fasthttp.RequestCtx, b *batch, strict bool) bool {
	body, dec, ok := s.requestBody(ctx, b, strict)
	if !ok {
		return false
	}
	var err error
	b.entries, err = dec.Attributes(b.entries, body, s.cfg.Limits, strict)
	if err != nil {
		s.fail(ctx, err)
		return false
	}
	return true
}

// requestBody returns the body of ctx without its Content-Encoding, and the
// decoder of its Content-Type. A decompressed body lives in b.body, so
// entries that alias it are valid until b is reset. A REST body (strict) of a
// type without a decoder is 415, as Spring answers a @RequestBody JsonNode; a
// device's is read as JSON, as ThingsBoard's device API takes a String body
// of any type (firmware sends what it sends).
func (s *Server) requestBody(ctx *fasthttp.RequestCtx, b *batch, strict bool) ([]byte, codec.Decoder, bool) {
	dec, err := codec.DecoderFor(ctx.Request.Header.ContentType())
	if _, unknown := err.(*codec.UnsupportedTypeError); unknown && !strict {
		dec, err = codec.JSON, nil
	}
	if err != nil {
		s.fail(ctx, err)
		return nil, nil, false
	}
	body, err := s.plainBody(ctx, b, s.maxBodySize())
	if err != nil {
		s.fail(ctx, err)
		return nil, nil, false
	}
	return body, dec, true
}

// plainBody returns the body of ctx without its Content-Encoding, decompressed
// into b.body (valid until b is reset) up to limit bytes.
func (s *Server) plainBody(ctx *fasthttp.RequestCtx, b *batch, limit int) ([]byte, error) {
	enc := ctx.Request.Header.ContentEncoding()
	if isIdentity(enc) {
		if body := ctx.PostBody(); len(body) <= limit {
			return body, nil
		}
		return nil, &tooLargeError{limit}
	}
	// A pooled buffer counts against the budget too while this request holds it.
	b.inflate = &s.inflate
	if c := cap(b.body); c > 0 && !b.reserve(c) {
		return nil, errInflateBusy
	}
	var err error
	b.body, err = decompress(b.body[:0], enc, ctx.PostBody(), limit, b)
	return b.body, err
}

// withBody calls f with the body of a JSON request (REST, RPC, claim) without
// its Content-Encoding, at most limit bytes once decompressed. An encoding it
// cannot take is answered here: 415 unknown, 400 corrupt, 413 past limit, 503
// past the node's budget.
func (s *Server) withBody(ctx *fasthttp.RequestCtx, limit int, f func(body []byte)) {
	b := batchPool.Get().(*batch)
	defer func() { b.reset(); batchPool.Put(b) }()
	body, err := s.plainBody(ctx, b, limit)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	f(body)
}

// defaultMaxBodySize applies when Config.MaxBodySize is not set; it is the
// default of SLUICE_MAX_BODY_SIZE.
const defaultMaxBodySize = 50 << 20

func (s *Server) maxBodySize() int {
	if s.cfg.MaxBodySize > 0 {
		return s.cfg.MaxBodySize
	}
	return defaultMaxBodySize
}

// maxPooledBody is the largest decompression buffer kept for reuse; a larger
// one (a rare huge batch) is left to the garbage collector.
const maxPooledBody = 4 << 20

// errTooLarge is a decompressed body past the limit. decompress returns it as
// a *tooLargeError, which carries the limit for the 413's message.
var errTooLarge = errors.New("decompressed body exceeds the limit")

type tooLargeError struct{ limit int }

func (e *tooLargeError) Error() string        { return errTooLarge.Error() }
func (e *tooLargeError) Is(target error) bool { return target == errTooLarge }

// errInflateBusy is a decompression refused because the bodies being
// decompressed at the same moment already hold the node's budget: a 503.
var errInflateBusy = errors.New("too many large compressed bodies are being decompressed at once; retry later")

// inflateBudget bounds the memory that the buffers of the decompressed bodies
// of all requests in flight may take together (pooled buffers included). One
// body is bounded by the body limit, but a compressed body that small on the
// wire (a 50 KB gzip of zeros decompresses to the 50 MiB limit) makes many of
// them at once cheap to send; past the budget a request is answered 503
// instead of growing the heap.
type inflateBudget struct{ left atomic.Int64 }

// inflateBudgetFor is the budget for a body limit: four bodies at the limit,
// and at least 64 MiB so that small limits do not refuse ordinary batches.
func inflateBudgetFor(limit int) int64 { return max(4*int64(limit), 64<<20) }

func (ib *inflateBudget) take(n int) bool {
	if ib.left.Add(-int64(n)) < 0 {
		ib.left.Add(int64(n))
		return false
	}
	return true
}

func (ib *inflateBudget) give(n int) { ib.left.Add(int64(n)) }

// reserver is what decompress asks before it grows a buffer by n bytes.
type reserver interface{ reserve(n int) bool }

type unsupportedEncodingError struct{ enc string }

func (e *unsupportedEncodingError) Error() string {
	return "Content-Encoding '" + e.enc + "' is not supported; supported encodings: gzip, zstd, identity"
}

func isIdentity(enc []byte) bool {
	enc = bytes.TrimSpace(enc)
	return len(enc) == 0 || bytes.EqualFold(enc, []byte("identity"))
}

// decompress appends the body decoded from Content-Encoding enc to dst. It
// reads at most limit+1 bytes of output: more is errTooLarge. Corrupt data is
// an error that names the encoding, for a 400. Each new buffer is reserved
// from res first (nil: no budget); a refusal is errInflateBusy.
func decompress(dst []byte, enc, body []byte, limit int, res reserver) ([]byte, error) {
	enc = bytes.TrimSpace(enc)
	switch {
	case bytes.EqualFold(enc, []byte("gzip")), bytes.EqualFold(enc, []byte("x-gzip")):
		r := getGzip()
		defer putGzip(r)
		r.src.Reset(body)
		if err := r.zr.Reset(&r.src); err != nil {
			return dst, corrupt("gzip", err, limit)
		}
		return readLimited(dst, &r.zr, limit, "gzip", res)
	case bytes.EqualFold(enc, []byte("zstd")):
		r, err := getZstd()
		if err != nil {
			return dst, err
		}
		defer putZstd(r)
		r.src.Reset(body)
		if err := r.reset(zstdWindow(limit)); err != nil {
			return dst, corrupt("zstd", err, limit)
		}
		return readLimited(dst, r.zr, limit, "zstd", res)
	}
	return dst, &unsupportedEncodingError{enc: string(enc)}
}

// corruptBodyError is compressed data that does not decode: a 400.
type corruptBodyError struct{ msg string }

func (e *corruptBodyError) Error() string { return e.msg }

func corrupt(enc string, err error, limit int) error {
	if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		return &tooLargeError{limit}
	}
	return &corruptBodyError{"Invalid " + enc + " body: " + err.Error()}
}

// readLimited appends all of r to dst, growing dst by doubling but never past
// limit+1 bytes, so what it allocates is bounded by the limit however much r
// would produce; each growth is reserved from res (when not nil) first.
func readLimited(dst []byte, r io.Reader, limit int, enc string, res reserver) ([]byte, error) {
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			grow := min(max(cap(dst)-start, 16<<10), limit+1-(len(dst)-start))
			// The new array holds the old one's bytes too, and the old one stays
			// until the collector takes it: reserve the whole new capacity.
			if res != nil && !res.reserve(len(dst)+grow) {
				return dst[:start], errInflateBusy
			}
			dst = slices.Grow(dst, grow)
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if len(dst)-start > limit {
			return dst[:start], &tooLargeError{limit}
		}
		switch {
		case err == io.EOF:
			return dst, nil
		case err != nil:
			return dst[:start], corrupt(enc, err, limit)
		}
	}
}

// gzipReader is a pooled gzip stream over a body.
type gzipReader struct {
	src bytes.Reader
	zr  gzip.Reader
}

var gzipPool sync.Pool

func getGzip() *gzipReader {
	if r, ok := gzipPool.Get().(*gzipReader); ok {
		return r
	}
	return new(gzipReader)
}

func putGzip(r *gzipReader) {
	r.src.Reset(nil) // drop the request body
	gzipPool.Put(r)
}

// zstdReader is a pooled zstd stream over a body.
type zstdReader struct {
	src    bytes.Reader
	zr     *zstd.Decoder
	window uint64 // the decoder's maximum window
}

var zstdPool sync.Pool

// zstdWindow is the largest window a zstd frame may declare: the body limit,
// at most 8 MiB (what the format asks every decoder to support and zstd levels
// 1-19 use at most). The decoder allocates the declared window up front, so
// this is what bounds a zstd bomb; a frame past it is refused as too large.
// A frame of known size declares a window no larger than its content.
func zstdWindow(limit int) uint64 {
	return uint64(min(max(limit, zstd.MinWindowSize), 8<<20))
}

// reset starts decoding r.src with the given maximum window; the options are
// only rebuilt when the window changes, which it does not with one limit.
func (r *zstdReader) reset(window uint64) error {
	if r.window == window {
		return r.zr.Reset(&r.src)
	}
	r.window = window
	return r.zr.ResetWithOptions(&r.src, zstd.WithDecoderMaxWindow(window))
}

func getZstd() (*zstdReader, error) {
	if r, ok := zstdPool.Get().(*zstdReader); ok {
		return r, nil
	}
	// One goroutine-free decoder per request: concurrency 1 decodes
	// synchronously in Read, and low-memory mode grows buffers as data comes.
	zr, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecodeBuffersBelow(0))
	if err != nil {
		return nil, err
	}
	return &zstdReader{zr: zr}, nil
}

func putZstd(r *zstdReader) {
	r.zr.Reset(nil)
	r.src.Reset(nil)
	zstdPool.Put(r)
}
