package httpapi

import (
	"net/netip"
	"strings"

	"github.com/valyala/fasthttp"
)

// clientAddr is the address of the client a request came from: the peer of the
// connection, or, when the peer is a trusted proxy (Config.TrustedProxies), the
// nearest address in X-Forwarded-For that is not one. The header is read from
// the right: what a proxy appended is its own peer, what stands left of the
// first untrusted address the client may have written itself. Behind a load
// balancer without this, every client has the balancer's address, and the
// failed-login budget per address locks them all out together.
func (s *Server) clientAddr(ctx *fasthttp.RequestCtx) string {
	peer, ok := netip.AddrFromSlice(ctx.RemoteIP())
	if !ok {
		return ctx.RemoteIP().String()
	}
	addr := peer.Unmap()
	if !s.trusted(addr) {
		return addr.String()
	}
	headers := ctx.Request.Header.PeekAll(fasthttp.HeaderXForwardedFor)
	for i := len(headers) - 1; i >= 0; i-- {
		hops := strings.Split(string(headers[i]), ",")
		for j := len(hops) - 1; j >= 0; j-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[j]))
			if err != nil {
				return addr.String() // a hop that is not an address: stop at the last trusted one
			}
			addr = hop.Unmap()
			if !s.trusted(addr) {
				return addr.String()
			}
		}
	}
	return addr.String()
}

func (s *Server) trusted(a netip.Addr) bool {
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
