package loadtest

import (
	"bytes"
	"fmt"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// The body encodings of Config.Encoding, as Content-Encoding names them.
const (
	EncodingGzip = "gzip"
	EncodingZstd = "zstd"
)

// CheckEncoding returns an error unless enc is "" (none), EncodingGzip or
// EncodingZstd.
func CheckEncoding(enc string) error {
	switch enc {
	case "", EncodingGzip, EncodingZstd:
		return nil
	}
	return fmt.Errorf("unknown encoding %q: want %s or %s", enc, EncodingGzip, EncodingZstd)
}

// encoder compresses one worker's bodies. Its encoder and buffers are reused,
// so a request costs the compression and no allocation; a body equal to the
// previous one (a Generator that repeats its payload) is not compressed again.
type encoder struct {
	gz   *gzip.Writer
	zs   *zstd.Encoder
	buf  bytes.Buffer // gzip's output
	out  []byte       // the compressed previous body (in buf with gzip)
	last []byte       // the previous body, as given
	ok   bool         // out is last compressed
}

// newEncoder returns the encoder of enc (CheckEncoding has passed it). Both run
// at their fastest level: the generator's CPU is better spent sending.
func newEncoder(enc string) *encoder {
	e := &encoder{}
	switch enc {
	case EncodingGzip:
		e.gz, _ = gzip.NewWriterLevel(&e.buf, gzip.BestSpeed)
	case EncodingZstd:
		// One goroutine, no window beyond what a body needs: EncodeAll on one
		// worker's small bodies.
		e.zs, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithLowerEncoderMem(true))
	}
	return e
}

// compress returns body compressed. The result is valid until the next call.
func (e *encoder) compress(body []byte) []byte {
	if e.ok && bytes.Equal(body, e.last) {
		return e.out
	}
	e.ok = false
	if e.zs != nil {
		e.out = e.zs.EncodeAll(body, e.out[:0])
	} else {
		e.buf.Reset()
		e.gz.Reset(&e.buf)
		e.gz.Write(body) // a bytes.Buffer does not fail
		e.gz.Close()
		e.out = e.buf.Bytes()
	}
	e.last = append(e.last[:0], body...)
	e.ok = true
	return e.out
}
