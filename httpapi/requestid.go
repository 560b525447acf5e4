package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// Request ids tie a response (X-Request-Id) to the node's log lines about it. A
// sane id from the client (a proxy's) is kept; otherwise the node makes one from
// a random prefix chosen at start and a counter: cheap, and unique across nodes.
// The id lives in the request's own X-Request-Id header, whose buffer fasthttp
// reuses, so giving a request its id allocates nothing.
var (
	requestPrefix = func() []byte {
		b := make([]byte, 4)
		rand.Read(b)
		return append(hex.AppendEncode(nil, b), '-')
	}()
	requestSeq atomic.Uint64
)

// requestIDHeader is canonical, as fasthttp stores parsed header names: the
// *Canonical calls skip normalising the name on every request.
var requestIDHeader = []byte("X-Request-Id")

// setRequestID gives the request its id; echoRequestID puts it in the response
// (after the handler: an error answer resets the response headers).
func setRequestID(ctx *fasthttp.RequestCtx) {
	if saneRequestID(ctx.Request.Header.PeekCanonical(requestIDHeader)) {
		return
	}
	var buf [32]byte
	id := strconv.AppendUint(append(buf[:0], requestPrefix...), requestSeq.Add(1), 36)
	ctx.Request.Header.SetCanonical(requestIDHeader, id)
}

func echoRequestID(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.SetCanonical(requestIDHeader, ctx.Request.Header.PeekCanonical(requestIDHeader))
}

// requestID is the id of the request, for log lines.
func requestID(ctx *fasthttp.RequestCtx) string {
	return string(ctx.Request.Header.PeekCanonical(requestIDHeader))
}

// saneRequestID accepts 1 to 64 characters of [A-Za-z0-9._-]: anything else
// could forge log lines or bloat them.
func saneRequestID(b []byte) bool {
	if len(b) == 0 || len(b) > 64 {
		return false
	}
	for _, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
