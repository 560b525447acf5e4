package httpapi

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// A long poll or a waiting RPC call holds its handler while its client may
// have gone (a device that lost its network polls again on a new connection).
// fasthttp says nothing of it until the answer fails to write, so a gone
// device's poll kept its per-device slot until its timeout, and a gone poll
// could take an RPC queued for the device and throw it away. hangupProbe is how
// often a waiting request looks at its connection: a non-blocking peek on the
// socket, one syscall, from a timer (no goroutine per wait).
var hangupProbe = 5 * time.Second

// errHungUp ends a wait whose client closed its connection.
var errHungUp = errors.New("client closed the connection")

// hungUp is err, or errHungUp when the wait of wctx ended because its client
// closed its connection.
func hungUp(wctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(wctx), errHungUp) {
		return errHungUp
	}
	return err
}

// untilHangup returns a context that ends (cause errHungUp) when the client of
// ctx closes its connection, or when the node's polls end; the engine also asks
// it, through engine.WithClient, right before handing over what it waited for.
// stop releases it.
func (s *Server) untilHangup(ctx *fasthttp.RequestCtx) (context.Context, func()) {
	return watchHangup(s.polls, ctx)
}

// watchHangup is untilHangup over any parent context.
func watchHangup(parent context.Context, ctx *fasthttp.RequestCtx) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(parent)
	sc, ok := ctx.Conn().(syscall.Conn)
	if !ok {
		return wctx, func() { cancel(nil) }
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return wctx, func() { cancel(nil) }
	}
	there := func() bool {
		alive := true
		if err := rc.Control(func(fd uintptr) { alive = peerOpen(fd) }); err != nil {
			alive = false // the connection is closed on our side
		}
		return alive
	}
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock() // t is set before its function, which reads it under mu, can run
	defer mu.Unlock()
	t = time.AfterFunc(hangupProbe, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if !there() {
			cancel(errHungUp)
			return
		}
		t.Reset(hangupProbe)
	})
	stop := func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		cancel(nil)
	}
	return engine.WithClient(wctx, there), stop
}
