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
var (
	requestPrefix = func() string {
		b := make([]byte, 4)
		rand.Read(b)
		return hex.EncodeToString(b) + "-"
	}()
	requestSeq atomic.Uint64
)

const requestIDKey = "sluice.requestId"

// setRequestID gives the request its id; echoRequestID puts it in the response
// (after the handler: an error answer resets the response headers).
func setRequestID(ctx *fasthttp.RequestCtx) {
	id := ctx.Request.Header.Peek("X-Request-Id")
	var s string
	if saneRequestID(id) {
		s = string(id)
	} else {
		s = requestPrefix + strconv.FormatUint(requestSeq.Add(1), 36)
	}
	ctx.SetUserValue(requestIDKey, s)
}

func echoRequestID(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("X-Request-Id", requestID(ctx))
}

// requestID is the id of the request, for log lines.
func requestID(ctx *fasthttp.RequestCtx) string {
	s, _ := ctx.UserValue(requestIDKey).(string)
	return s
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
